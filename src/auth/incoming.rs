//! The gRPC port's accept loop: TCP, then TLS when configured, with each handshake
//! in a task of its own so that a slow or silent client cannot hold up the others.

use std::{
    io,
    net::SocketAddr,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::mpsc,
};
use tokio_rustls::{TlsAcceptor, server::TlsStream};
use tokio_stream::{Stream, wrappers::ReceiverStream};
use tonic::transport::server::Connected;

use super::tls::{TlsReloader, caller_name};

/// How long a client has to complete its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause after a failed accept: out of file descriptors, retrying at once would
/// only spin.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);
/// Ready connections waiting for tonic to take them (it takes them at once).
const READY_CONNECTIONS: usize = 32;
/// TLS handshakes in progress at most.
const HANDSHAKES: usize = 256;

/// Who is on the other end of a gRPC connection; tonic puts it into every request's
/// extensions (`request.extensions().get::<PeerInfo>()`).
#[derive(Debug, Clone)]
pub struct PeerInfo {
    /// The client's address.
    pub remote_addr: Option<SocketAddr>,
    /// The verified mTLS client certificate's name ([`caller_name`]); `None` without mTLS.
    pub client_name: Option<String>,
}

/// A connection to the gRPC port, plaintext or TLS.
pub enum GrpcConn {
    /// No TLS configured.
    Plain(TcpStream),
    /// After a completed handshake.
    Tls(Box<TlsStream<TcpStream>>),
}

/// The gRPC port's connections for `Server::serve_with_incoming_shutdown`: TLS
/// handshakes already done (with the configuration current at accept time), failed
/// ones logged and left out. Accepting stops when the stream is dropped.
pub fn incoming(
    listener: TcpListener,
    tls: Option<Arc<TlsReloader>>,
) -> impl Stream<Item = Result<GrpcConn, io::Error>> + Send + 'static {
    let (tx, rx) = mpsc::channel(READY_CONNECTIONS);
    tokio::spawn(accept_loop(listener, tls, tx));
    ReceiverStream::new(rx)
}

async fn accept_loop(
    listener: TcpListener,
    tls: Option<Arc<TlsReloader>>,
    tx: mpsc::Sender<Result<GrpcConn, io::Error>>,
) {
    let handshakes = Arc::new(tokio::sync::Semaphore::new(HANDSHAKES));
    loop {
        let accepted = tokio::select! {
            () = tx.closed() => return,
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            // The client gave up before we took it: nothing is wrong with the listener.
            Err(error) if is_connection_error(&error) => {
                tracing::debug!(%error, "gRPC port: connection closed before accept");
                continue;
            }
            Err(error) => {
                tracing::error!(%error, "gRPC port: cannot accept connections; retrying");
                tokio::select! {
                    () = tx.closed() => return,
                    () = tokio::time::sleep(ACCEPT_RETRY) => continue,
                }
            }
        };
        // Nagle would hold back every small streamed event behind the previous one's ACK.
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::debug!(%peer, %error, "gRPC port: cannot set TCP_NODELAY");
        }
        match &tls {
            None => {
                if tx.send(Ok(GrpcConn::Plain(tcp))).await.is_err() {
                    return;
                }
            }
            Some(tls) => {
                // A flood of connections that never finish their handshake waits in the
                // kernel's backlog instead of growing tasks without bound.
                let permit = tokio::select! {
                    () = tx.closed() => return,
                    permit = handshakes.clone().acquire_owned() => permit,
                };
                let Ok(permit) = permit else { return };
                let acceptor = TlsAcceptor::from(tls.current());
                tokio::spawn(handshake(acceptor, tcp, peer, tx.clone(), permit));
            }
        }
    }
}

/// Completes one TLS handshake and hands the connection on; a failed one is logged
/// and dropped (an error in the stream would only be logged by tonic at trace level).
async fn handshake(
    acceptor: TlsAcceptor,
    tcp: TcpStream,
    peer: SocketAddr,
    tx: mpsc::Sender<Result<GrpcConn, io::Error>>,
    _permit: tokio::sync::OwnedSemaphorePermit,
) {
    let done = tokio::select! {
        () = tx.closed() => return,
        done = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)) => done,
    };
    match done {
        Ok(Ok(stream)) => {
            let _ = tx.send(Ok(GrpcConn::Tls(Box::new(stream)))).await;
        }
        // TCP probes of load balancers and port scanners: routine, not worth a line.
        Ok(Err(error)) if is_connection_error(&error) => {
            tracing::debug!(%peer, %error, "gRPC port: TLS handshake failed");
        }
        Ok(Err(error)) => tracing::info!(%peer, %error, "gRPC port: TLS handshake failed"),
        Err(_) => tracing::info!(
            %peer,
            timeout = ?HANDSHAKE_TIMEOUT,
            "gRPC port: TLS handshake timed out"
        ),
    }
}

/// An error of one connection (the peer left), not of the listener or the process.
fn is_connection_error(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::UnexpectedEof
            | io::ErrorKind::BrokenPipe
    )
}

impl Connected for GrpcConn {
    type ConnectInfo = PeerInfo;

    fn connect_info(&self) -> PeerInfo {
        match self {
            Self::Plain(tcp) => PeerInfo {
                remote_addr: tcp.peer_addr().ok(),
                client_name: None,
            },
            Self::Tls(stream) => {
                let (tcp, session) = stream.get_ref();
                PeerInfo {
                    remote_addr: tcp.peer_addr().ok(),
                    // Present only when verified: without a client CA none is asked for.
                    client_name: session
                        .peer_certificates()
                        .and_then(<[_]>::first)
                        .and_then(caller_name),
                }
            }
        }
    }
}

impl AsyncRead for GrpcConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for GrpcConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Self::Plain(s) => s.is_write_vectored(),
            Self::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_flush(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
