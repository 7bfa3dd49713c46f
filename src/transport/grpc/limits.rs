//! The largest request msgw reads, and the gRPC code for one that is larger.
//!
//! tonic refuses a message above its decoding limit with OUT_OF_RANGE; gRPC's
//! convention (and what clients retry-classify on) is RESOURCE_EXHAUSTED, so this
//! layer rewrites exactly that refusal. OUT_OF_RANGE from msgw itself (a stream
//! cursor outside the log) passes untouched.

use std::task::{Context, Poll};

use futures_util::{TryFutureExt, future::MapOk};
use http::HeaderValue;

/// Largest request message msgw decodes: a full `Batch` of the largest operations
/// fits many times over; anything bigger is a mistake or an attack, refused before
/// it is parsed.
pub const MAX_REQUEST_BYTES: usize = 1024 * 1024;

/// Rewrites tonic's "message too large" refusal to RESOURCE_EXHAUSTED.
#[derive(Debug, Clone, Copy, Default)]
pub struct TooLargeLayer;

impl<S> tower_layer::Layer<S> for TooLargeLayer {
    type Service = TooLarge<S>;

    fn layer(&self, inner: S) -> Self::Service {
        TooLarge(inner)
    }
}

/// The service [`TooLargeLayer`] wraps.
#[derive(Debug, Clone)]
pub struct TooLarge<S>(S);

type Rewrite<B> = fn(http::Response<B>) -> http::Response<B>;

impl<S, B, R> tower_service::Service<http::Request<B>> for TooLarge<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<R>>,
{
    type Response = http::Response<R>;
    type Error = S::Error;
    type Future = MapOk<S::Future, Rewrite<R>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        self.0
            .call(request)
            .map_ok(resource_exhausted as Rewrite<R>)
    }
}

/// tonic's text for a message above the decoding limit (percent-encoded in
/// `grpc-message`, so matched on words that encoding leaves alone).
const TOO_LARGE: [&str; 3] = ["decoded", "message", "too"];

fn resource_exhausted<B>(mut response: http::Response<B>) -> http::Response<B> {
    let headers = response.headers_mut();
    let out_of_range = headers
        .get("grpc-status")
        .is_some_and(|v| v.as_bytes() == b"11");
    let too_large = headers
        .get("grpc-message")
        .and_then(|m| m.to_str().ok())
        .is_some_and(|m| m.starts_with("Error,") && TOO_LARGE.iter().all(|w| m.contains(w)));
    if out_of_range && too_large {
        headers.insert("grpc-status", HeaderValue::from_static("8"));
    }
    response
}
