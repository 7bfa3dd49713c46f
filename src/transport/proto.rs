//! Types and services generated from `proto/msgw/v1`.

#![allow(missing_docs, clippy::large_enum_variant, clippy::enum_variant_names)]

tonic::include_proto!("msgw.v1");

/// Encoded descriptor set of every proto file, served by gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("msgw_descriptor");

/// `google.type` (vendored in `proto/google/type/`).
pub mod google_type {
    /// An amount of money with its currency type (`google.type.Money`).
    #[derive(Clone, PartialEq, Eq, ::prost::Message)]
    pub struct Money {
        /// The three-letter currency code defined in ISO 4217.
        #[prost(string, tag = "1")]
        pub currency_code: ::prost::alloc::string::String,
        /// The whole units of the amount.
        #[prost(int64, tag = "2")]
        pub units: i64,
        /// Number of nano (10^-9) units of the amount, with the sign of `units`.
        #[prost(int32, tag = "3")]
        pub nanos: i32,
    }
}
