//! Types and services generated from `proto/msgw/v1`.

#![allow(missing_docs, clippy::large_enum_variant, clippy::enum_variant_names)]

tonic::include_proto!("msgw.v1");

/// Encoded descriptor set of every proto file, served by gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("msgw_descriptor");
