//! Who may call msgw's gRPC port: TLS and mTLS on the connection, bearer tokens
//! from the callers file, per-caller permissions and send rates. Authentication is a
//! tower layer under tonic (and the accept loop under that, for TLS); the RPC handlers
//! only read the [`Caller`] the layer put into the request and [`admit`] its
//! operations.

pub(crate) mod callers;
pub(crate) mod files;
pub mod incoming;
mod layer;
mod permits;
pub mod tls;

pub use callers::{Caller, EventScope, Permission};
pub use layer::{AuthError, AuthLayer, Authenticator, RpcMethod, is_open_path};
pub use permits::{Asks, admit};

/// The method of a call, as the authentication layer named it.
pub fn method_of<T>(request: &tonic::Request<T>) -> &'static str {
    request
        .extensions()
        .get::<RpcMethod>()
        .map_or("unknown", |m| m.0)
}

/// The caller the auth layer put into a request. A request without one never passed
/// the layer (a wiring bug): it is refused rather than let through.
pub fn caller_of<T>(
    request: &tonic::Request<T>,
) -> Result<std::sync::Arc<Caller>, crate::core::domain::Error> {
    request
        .extensions()
        .get::<std::sync::Arc<Caller>>()
        .cloned()
        .ok_or_else(|| {
            crate::core::domain::Error::Internal("the call skipped authentication".into())
        })
}
