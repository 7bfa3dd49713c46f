//! What a connection's requests go through before msgw's layers: the peer's identity
//! into the extensions, the caller's `grpc-timeout` enforced, and each stream
//! counted open until its response body is done.

use std::{
    convert::Infallible,
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use tonic::body::Body;

use super::GrpcRoutes;
use crate::auth::incoming::PeerInfo;
use crate::conn_table::{Conn, StreamGuard};
use crate::grpc::deadline::parse_grpc_timeout;

/// The service of one connection: msgw's layered routes, per request.
#[derive(Clone)]
pub struct ConnService<S> {
    pub inner: S,
    pub conn: Arc<Conn>,
    pub peer: PeerInfo,
}

impl<S: GrpcRoutes> hyper::service::Service<http::Request<Incoming>> for ConnService<S> {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, request: http::Request<Incoming>) -> Self::Future {
        // Health and reflection need no token: such streams do not keep the
        // connection at the cap.
        let guarded = !crate::auth::is_open_path(request.uri().path());
        let stream = self.conn.stream_opened(guarded);
        let mut request = request.map(Body::new);
        request.extensions_mut().insert(self.peer.clone());
        let timeout = request
            .headers()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_grpc_timeout);
        let mut inner = self.inner.clone();
        Box::pin(async move {
            let call = async move {
                std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
                inner.call(request).await
            };
            // The caller has given up by its deadline: stop working for it (msgw's
            // handlers answer a little before it, with their own status).
            let answered = match timeout {
                None => call.await,
                Some(timeout) => match tokio::time::timeout(timeout, call).await {
                    Ok(answered) => answered,
                    Err(_) => {
                        let cancelled = tonic::Status::cancelled("Timeout expired").into_http();
                        return Ok(cancelled.map(|body| tracked(body, stream)));
                    }
                },
            };
            let Ok(response) = answered;
            Ok(response.map(|body| tracked(Body::new(body), stream)))
        })
    }
}

/// `body`, keeping `stream` counted open until it is done or dropped.
fn tracked(body: Body, stream: StreamGuard) -> Body {
    Body::new(Tracked {
        body,
        _stream: stream,
    })
}

/// A response body that keeps its stream counted open until it is done or dropped.
struct Tracked {
    body: Body,
    _stream: StreamGuard,
}

impl HttpBody for Tracked {
    type Data = hyper::body::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
