//! The caller's deadline (`grpc-timeout`), measured from when the request arrived.
//!
//! The gRPC port (`port/service.rs`) enforces the same header and answers CANCELLED
//! when it expires.
//! msgw ends the gateway call a little earlier, counting from the same moment, so
//! the caller gets msgw's DEADLINE_EXCEEDED with its OUTCOME_UNKNOWN detail instead.

use std::{
    task::{Context, Poll},
    time::Duration,
};

use tokio::time::Instant;
use tonic::Request;

/// Room left before the caller's deadline for msgw to answer (at most a tenth of the
/// deadline). The caller counts its deadline from its send and msgw from the request's
/// arrival: a request that took longer than this to arrive (a throttled pod, a busy
/// node) would have the caller's own timer fire first, without msgw's detail.
const MARGIN: Duration = Duration::from_millis(100);

/// When a request reached msgw's services.
#[derive(Debug, Clone, Copy)]
struct Received(Instant);

/// Stamps every request with its arrival time, before the body is read.
#[derive(Debug, Clone, Copy, Default)]
pub struct StampLayer;

impl<S> tower_layer::Layer<S> for StampLayer {
    type Service = Stamp<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Stamp(inner)
    }
}

/// The service [`StampLayer`] wraps.
#[derive(Debug, Clone)]
pub struct Stamp<S>(S);

impl<S, B> tower_service::Service<http::Request<B>> for Stamp<S>
where
    S: tower_service::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        request.extensions_mut().insert(Received(Instant::now()));
        self.0.call(request)
    }
}

/// The instant by which msgw must answer, if the caller set a deadline.
pub fn deadline<T>(request: &Request<T>) -> Option<Instant> {
    let value = request.metadata().get("grpc-timeout")?.to_str().ok()?;
    let timeout = parse_grpc_timeout(value)?;
    let received = request
        .extensions()
        .get::<Received>()
        .map_or_else(Instant::now, |r| r.0);
    Some(received + timeout.saturating_sub(MARGIN.min(timeout / 10)))
}

/// `grpc-timeout` is at most 8 digits and a unit (H, M, S, m, u, n).
pub(crate) fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    if value.len() < 2 || value.len() > 9 {
        return None;
    }
    let (digits, unit) = value.split_at(value.len() - 1);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.checked_mul(3600)?),
        "M" => Duration::from_secs(n.checked_mul(60)?),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeout_units() {
        assert_eq!(parse_grpc_timeout("5S"), Some(Duration::from_secs(5)));
        assert_eq!(parse_grpc_timeout("250m"), Some(Duration::from_millis(250)));
        assert_eq!(parse_grpc_timeout("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(
            parse_grpc_timeout("99999999n"),
            Some(Duration::from_nanos(99_999_999))
        );
        for bad in ["", "S", "5", "5x", "123456789S", "-5S"] {
            assert_eq!(parse_grpc_timeout(bad), None, "{bad}");
        }
    }
}
