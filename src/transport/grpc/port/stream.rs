//! One HTTP/2 stream's life on the gRPC port: admitted against the connection's and
//! the port's bounds, through msgw's layers with the peer's identity and the
//! caller's `grpc-timeout`, then its answer sent as fast as the client reads it.
//!
//! msgw never holds more of an answer than the chunk in hand: a chunk goes to HTTP/2
//! only as far as the client's flow-control window allows. A client that leaves the
//! window shut for the send timeout gets its stream reset (`CANCEL`), and whatever
//! the answer held is dropped.

use std::{future::poll_fn, pin::pin, sync::Arc, time::Duration};

use h2::{Reason, RecvStream, SendStream, server::SendResponse};
use hyper::body::{Body as HttpBody, Bytes};
use tokio::time::{Instant, timeout, timeout_at};
use tonic::body::Body;

use super::received::Received;
use super::{GrpcRoutes, STREAM_WINDOW};
use crate::base::metrics::Metrics;
use crate::core::held::HeldKind;
use crate::transport::auth::incoming::PeerInfo;
use crate::transport::conn_table::{Conn, Refused, StreamGuard};
use crate::transport::grpc::deadline::parse_grpc_timeout;

/// What every stream of one connection shares.
pub struct Shared {
    pub conn: Arc<Conn>,
    pub peer: PeerInfo,
    pub send_timeout: Duration,
    pub metrics: Arc<Metrics>,
}

/// The path of `grpc.health.v1.Health/Check`.
const HEALTH_CHECK: &str = "/grpc.health.v1.Health/Check";

/// A client's flow-control window shut this long marks its stream stalled (towards
/// the connection counting as idle); the stream is reset at the send timeout.
const STALL_MARK: Duration = Duration::from_secs(1);

/// Serves one stream until its answer is sent, the client resets it, or it is reset
/// for not reading.
pub async fn serve<S: GrpcRoutes>(
    request: http::Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    mut routes: S,
    shared: Arc<Shared>,
) {
    let path = request.uri().path();
    let guarded = !crate::transport::auth::is_open_path(path);
    // A health check is answered at once and holds nothing: at the memory budget it
    // is still served (the heaviest connection goes all the same), so probes do not
    // fail while msgw makes room.
    let probe = path == HEALTH_CHECK;
    // What the client may send on an unfinished body before msgw gives window back
    // counts from the start: thousands of streams cannot each push a window unasked.
    let window = if request.body().is_end_stream() {
        0
    } else {
        STREAM_WINDOW
    };
    let stream = match shared
        .conn
        .stream_opened(guarded, probe, header_bytes(&request), window)
    {
        Ok(stream) => stream,
        Err(refused) => {
            refuse(&mut respond, refused, &shared.metrics);
            return;
        }
    };
    let (parts, recv) = request.into_parts();
    let body = Body::new(Received::new(recv, stream.clone(), window));
    let mut request = http::Request::from_parts(parts, body);
    request.extensions_mut().insert(shared.peer.clone());
    // The authentication layer charges the stream to its caller; handlers count on it
    // what they load for the call.
    request.extensions_mut().insert(stream.clone());
    let deadline = request
        .headers()
        .get("grpc-timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(parse_grpc_timeout);
    let call = async move {
        poll_fn(|cx| routes.poll_ready(cx)).await?;
        routes.call(request).await
    };
    // The caller has given up by its deadline: stop working for it (msgw's handlers
    // answer a little before it, with their own status).
    let call = async move {
        match deadline {
            None => call.await.map(|r| r.map(Body::new)),
            Some(deadline) => match timeout(deadline, call).await {
                Ok(answered) => answered.map(|r| r.map(Body::new)),
                Err(_) => Ok(tonic::Status::cancelled("Timeout expired").into_http::<Body>()),
            },
        }
    };
    let answered = tokio::select! {
        answered = call => answered,
        // The client reset the stream: its answer is wanted no more.
        _ = poll_fn(|cx| respond.poll_reset(cx)) => return,
    };
    let Ok(response) = answered;
    let (head, body) = response.into_parts();
    let head = http::Response::from_parts(head, ());
    if body.is_end_stream() {
        let _ = respond.send_response(head, true);
        return;
    }
    let Ok(tx) = respond.send_response(head, false) else {
        return;
    };
    let sender = Sender {
        tx,
        stream,
        send_timeout: shared.send_timeout,
        metrics: &shared.metrics,
    };
    sender.pipe(body).await;
}

/// What a stream's request headers hold in memory, as HTTP/2 counts a header list
/// (each field's name and value plus 32).
fn header_bytes<B>(request: &http::Request<B>) -> usize {
    let fields: usize = request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 32)
        .sum();
    fields + request.uri().path().len() + 32
}

/// Answers a stream msgw will not serve with RESOURCE_EXHAUSTED, in its headers alone.
fn refuse(respond: &mut SendResponse<Bytes>, refused: Refused, metrics: &Metrics) {
    metrics
        .ports
        .grpc_streams_refused
        .with_label_values(&[refused.label()])
        .inc();
    let status = tonic::Status::resource_exhausted(refused.message());
    let (head, _) = status.into_http::<()>().into_parts();
    let _ = respond.send_response(http::Response::from_parts(head, ()), true);
}

/// Sends one answer's body as the client's window allows.
struct Sender<'a> {
    tx: SendStream<Bytes>,
    stream: StreamGuard,
    send_timeout: Duration,
    metrics: &'a Metrics,
}

/// Why sending an answer stopped early.
enum Cut {
    /// The client reset the stream or the connection is gone.
    Gone,
    /// The client left its window shut for the send timeout.
    Stalled,
}

impl Sender<'_> {
    async fn pipe<B>(mut self, body: B)
    where
        B: HttpBody<Data = Bytes, Error: Into<tonic::codegen::StdError>>,
    {
        let mut body = pin!(body);
        loop {
            let frame = tokio::select! {
                frame = poll_fn(|cx| body.as_mut().poll_frame(cx)) => frame,
                _ = poll_fn(|cx| self.tx.poll_reset(cx)) => return,
            };
            let frame = match frame {
                None => {
                    let _ = self.tx.send_data(Bytes::new(), true);
                    return;
                }
                Some(Err(error)) => {
                    let error: tonic::codegen::StdError = error.into();
                    tracing::debug!(%error, "gRPC port: answer body failed");
                    self.tx.send_reset(Reason::INTERNAL_ERROR);
                    return;
                }
                Some(Ok(frame)) => frame,
            };
            match frame.into_data() {
                Ok(data) => {
                    let end = body.is_end_stream();
                    match self.send(data, end).await {
                        Ok(()) if end => return,
                        Ok(()) => {}
                        Err(Cut::Gone) => return,
                        Err(Cut::Stalled) => {
                            self.metrics
                                .ports
                                .grpc_streams_reset
                                .with_label_values(&["send_timeout"])
                                .inc();
                            self.tx.send_reset(Reason::CANCEL);
                            return;
                        }
                    }
                }
                Err(frame) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        self.tx.reserve_capacity(0);
                        let _ = self.tx.send_trailers(trailers);
                        return;
                    }
                }
            }
        }
    }

    /// Hands `data` to HTTP/2 no faster than the client's window opens.
    async fn send(&mut self, mut data: Bytes, end: bool) -> Result<(), Cut> {
        if data.is_empty() {
            return self.tx.send_data(data, end).map_err(|_| Cut::Gone);
        }
        // The common case: the client's window has room, and the answer goes to HTTP/2
        // at once without being held here (nor counted: HTTP/2 writes it out within
        // the connection's window).
        self.tx.reserve_capacity(data.len());
        if self.tx.capacity() >= data.len() {
            return self.tx.send_data(data, end).map_err(|_| Cut::Gone);
        }
        self.stream.hold(HeldKind::Answer, data.len());
        let result = async {
            while !data.is_empty() {
                self.tx.reserve_capacity(data.len());
                let capacity = self.capacity().await?;
                let chunk = data.split_to(capacity.min(data.len()));
                self.stream.release(HeldKind::Answer, chunk.len());
                self.tx
                    .send_data(chunk, end && data.is_empty())
                    .map_err(|_| Cut::Gone)?;
            }
            Ok(())
        }
        .await;
        // What could not be sent is dropped with the stream.
        if !data.is_empty() {
            self.stream.release(HeldKind::Answer, data.len());
        }
        result
    }

    /// Waits for flow-control capacity: the stream is marked stalled after
    /// [`STALL_MARK`] and cut at the send timeout.
    async fn capacity(&mut self) -> Result<usize, Cut> {
        if let n @ 1.. = self.tx.capacity() {
            return Ok(n);
        }
        let since = Instant::now();
        let tx = &mut self.tx;
        match timeout_at(since + STALL_MARK.min(self.send_timeout), next_capacity(tx)).await {
            Ok(granted) => return granted,
            Err(_) if self.send_timeout <= STALL_MARK => return Err(Cut::Stalled),
            Err(_) => {}
        }
        let _stalled = self.stream.stalled();
        match timeout_at(since + self.send_timeout, next_capacity(&mut self.tx)).await {
            Ok(granted) => granted,
            Err(_) => Err(Cut::Stalled),
        }
    }
}

/// The next capacity HTTP/2 assigns the stream.
async fn next_capacity(tx: &mut SendStream<Bytes>) -> Result<usize, Cut> {
    loop {
        match poll_fn(|cx| tx.poll_capacity(cx)).await {
            Some(Ok(0)) => continue,
            Some(Ok(n)) => return Ok(n),
            Some(Err(_)) | None => return Err(Cut::Gone),
        }
    }
}
