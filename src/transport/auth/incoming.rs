//! A gRPC connection's transport: plaintext, or TLS with the configuration current
//! when its handshake began; and who is on the other end of it. The accept loop and
//! the connections' bounds are in `grpc::port`.

use std::{
    io,
    net::SocketAddr,
    pin::Pin,
    task::{Context, Poll},
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
};
use tokio_rustls::{TlsAcceptor, server::TlsStream};

use super::tls::{TlsReloader, caller_name};

/// Who is on the other end of a gRPC connection; in every request's extensions
/// (`request.extensions().get::<PeerInfo>()`).
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

impl GrpcConn {
    /// Completes the TLS handshake with the configuration current now (no time limit:
    /// the caller bounds it).
    pub async fn tls(tcp: TcpStream, tls: &TlsReloader) -> io::Result<Self> {
        let stream = TlsAcceptor::from(tls.current()).accept(tcp).await?;
        Ok(Self::Tls(Box::new(stream)))
    }

    /// Who is on the other end.
    pub fn peer_info(&self) -> PeerInfo {
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

/// An error of one connection (the peer left), not of the listener or the process.
pub fn is_connection_error(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::UnexpectedEof
            | io::ErrorKind::BrokenPipe
    )
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
