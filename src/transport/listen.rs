//! Listen addresses and their sockets. `MSGW_GRPC_ADDR`, `MSGW_HTTP_ADDR` and
//! `MSGW_ADMIN_ADDR` take an IP address or a host name; a host name listens on every
//! address it resolves to, and `localhost` on both loopback addresses (`127.0.0.1`
//! and `[::1]`), so a client that tries IPv6 first is not refused. A port is then served by several sockets,
//! accepted from as one.

use std::future::poll_fn;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;

use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// Connections the kernel holds for a listener before msgw accepts them. Beyond it new
/// ones are dropped and their clients wait for a retransmission (a second or more), so
/// it is well above the usual 128: clients that reconnect as soon as they are closed
/// must not crowd a probe out of the queue.
const BACKLOG: u32 = 1024;

/// A listen address as configured: what was given, and the addresses it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenAddr {
    given: String,
    addrs: Vec<SocketAddr>,
}

impl ListenAddr {
    /// `IP:PORT` or `HOST:PORT`; a host name is looked up once, here.
    pub fn parse(value: &str) -> Result<Self, String> {
        if let Ok(addr) = value.parse::<SocketAddr>() {
            return Ok(addr.into());
        }
        let found = value.to_socket_addrs().map_err(|e| {
            format!("expected IP:PORT or HOST:PORT (e.g. 0.0.0.0:50051, localhost:50051): {e}")
        })?;
        let mut addrs: Vec<SocketAddr> = Vec::new();
        // `localhost` is both loopbacks (RFC 6761), whatever /etc/hosts lists: clients
        // such as grpcurl and browsers try `[::1]` for it.
        let host = value.rsplit_once(':').map_or(value, |(host, _)| host);
        let loopbacks: Vec<SocketAddr> = found.as_slice().first().map_or_else(Vec::new, |a| {
            if host.eq_ignore_ascii_case("localhost")
                || host.to_ascii_lowercase().ends_with(".localhost")
            {
                vec![
                    SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), a.port()),
                    SocketAddr::new(std::net::Ipv6Addr::LOCALHOST.into(), a.port()),
                ]
            } else {
                Vec::new()
            }
        });
        for addr in found.chain(loopbacks) {
            if !addrs.contains(&addr) {
                addrs.push(addr);
            }
        }
        // IPv4 first: the address logs and `local_addr` show, what most clients try.
        addrs.sort_by_key(|a| !a.is_ipv4());
        if addrs.is_empty() {
            return Err(format!("{value} names no address"));
        }
        Ok(Self {
            given: value.to_owned(),
            addrs,
        })
    }

    /// Every address to listen on (at least one; IPv4 first).
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// The first address.
    pub fn first(&self) -> SocketAddr {
        self.addrs[0]
    }
}

impl From<SocketAddr> for ListenAddr {
    fn from(addr: SocketAddr) -> Self {
        Self {
            given: addr.to_string(),
            addrs: vec![addr],
        }
    }
}

impl std::fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.given)
    }
}

/// The sockets of one port, accepted from as one.
pub struct Listeners {
    sockets: Vec<TcpListener>,
    /// Where the next accept starts looking, so no socket starves the others.
    next: AtomicUsize,
}

impl Listeners {
    /// Binds every address of `addr`. Port 0 takes the port the system gives the first
    /// address for all of them. An address of a host name the system cannot listen on
    /// (`::1` where IPv6 is off) is skipped while another one is bound; any other
    /// failure (the port is in use) fails the whole port.
    pub fn bind(addr: &ListenAddr) -> std::io::Result<Self> {
        Ok(Self {
            sockets: bind_each(addr, bind_one, TcpListener::local_addr)?,
            next: AtomicUsize::new(0),
        })
    }

    /// Whether [`Listeners::bind`] would bind `addr` now, tried with sockets closed
    /// at once; works outside a runtime (for reporting a busy port with the other
    /// start problems).
    pub fn probe(addr: &ListenAddr) -> std::io::Result<()> {
        bind_each(
            addr,
            std::net::TcpListener::bind,
            std::net::TcpListener::local_addr,
        )
        .map(drop)
    }

    /// The bound address of the first socket.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.sockets[0].local_addr()
    }

    /// The bound addresses of every socket.
    pub fn local_addrs(&self) -> std::io::Result<Vec<SocketAddr>> {
        self.sockets.iter().map(TcpListener::local_addr).collect()
    }

    /// The bound addresses, for a log line (`127.0.0.1:50051 [::1]:50051`).
    pub fn describe(&self) -> String {
        let addrs: Vec<String> = self
            .sockets
            .iter()
            .filter_map(|s| s.local_addr().ok())
            .map(|a| a.to_string())
            .collect();
        addrs.join(" ")
    }

    /// The next connection on any of the sockets.
    pub async fn accept(&self) -> std::io::Result<(TcpStream, SocketAddr)> {
        let n = self.sockets.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed) % n;
        poll_fn(|cx| {
            for i in 0..n {
                if let Poll::Ready(accepted) = self.sockets[(start + i) % n].poll_accept(cx) {
                    return Poll::Ready(accepted);
                }
            }
            Poll::Pending
        })
        .await
    }
}

impl From<TcpListener> for Listeners {
    fn from(socket: TcpListener) -> Self {
        Self {
            sockets: vec![socket],
            next: AtomicUsize::new(0),
        }
    }
}

/// Binds each address, or gives the error of every one that cannot be bound (with its
/// index in `addrs`), all at once.
pub fn bind_all<const N: usize>(
    addrs: [&ListenAddr; N],
) -> Result<[Listeners; N], Vec<(usize, std::io::Error)>> {
    let mut bound = Vec::with_capacity(N);
    let mut failed = Vec::new();
    for (i, addr) in addrs.into_iter().enumerate() {
        match Listeners::bind(addr) {
            Ok(listeners) => bound.push(listeners),
            Err(e) => failed.push((i, e)),
        }
    }
    match <[Listeners; N]>::try_from(bound) {
        Ok(bound) if failed.is_empty() => Ok(bound),
        _ => Err(failed),
    }
}

/// For `axum::serve` (the `msgw sandbox` gateway): a failed accept other than a
/// client's is logged and retried after a pause, as axum does for one socket.
impl axum::serve::Listener for Listeners {
    type Io = TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (TcpStream, SocketAddr) {
        loop {
            match Listeners::accept(self).await {
                Ok(accepted) => return accepted,
                Err(e) if crate::transport::auth::incoming::is_connection_error(&e) => {}
                Err(e) => {
                    tracing::error!(error = %e, "cannot accept connections; retrying");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Listeners::local_addr(self)
    }
}

/// Binds one address with a backlog of [`BACKLOG`].
/// Binds every address of `addr` with `bind` ([`Listeners::bind`]'s rules).
fn bind_each<L>(
    addr: &ListenAddr,
    bind: impl Fn(SocketAddr) -> std::io::Result<L>,
    local_addr: impl Fn(&L) -> std::io::Result<SocketAddr>,
) -> std::io::Result<Vec<L>> {
    let mut sockets: Vec<L> = Vec::new();
    let mut port = None;
    let several = addr.addrs.len() > 1;
    for &wanted in &addr.addrs {
        let wanted = SocketAddr::new(wanted.ip(), port.unwrap_or(wanted.port()));
        match bind(wanted) {
            Ok(socket) => {
                port.get_or_insert(local_addr(&socket)?.port());
                sockets.push(socket);
            }
            Err(e) if several && unavailable(&e) => {
                tracing::warn!(skipped = %wanted, error = %e, "cannot listen on one address of {addr}");
            }
            Err(e) => return Err(e),
        }
    }
    if sockets.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AddrNotAvailable,
            format!("no address of {addr} can be listened on"),
        ));
    }
    Ok(sockets)
}

fn bind_one(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match addr.ip() {
        IpAddr::V4(_) => TcpSocket::new_v4()?,
        IpAddr::V6(_) => TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// Whether `e` says this machine has no such address (or no such address family),
/// rather than that the port is taken.
fn unavailable(e: &std::io::Error) -> bool {
    // EAFNOSUPPORT (97): IPv6 compiled out or disabled.
    e.kind() == std::io::ErrorKind::AddrNotAvailable || e.raw_os_error() == Some(97)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_host_name_listens_on_each_of_its_addresses_on_one_port() {
        let addr = ListenAddr::parse("localhost:0").unwrap();
        let listeners = Listeners::bind(&addr).unwrap();
        let bound = listeners.local_addrs().unwrap();
        assert!(
            bound.iter().all(|a| a.port() == bound[0].port()),
            "{bound:?}"
        );
        assert!(bound[0].is_ipv4(), "{bound:?}");
        // Where the machine has an IPv6 loopback, `localhost` listens there too.
        if std::net::TcpListener::bind("[::1]:0").is_ok() {
            assert!(
                bound
                    .iter()
                    .any(|a| a.ip() == std::net::Ipv6Addr::LOCALHOST),
                "{bound:?}"
            );
        }
        for target in &bound {
            let client = TcpStream::connect(target).await.unwrap();
            let (_, peer) = listeners.accept().await.unwrap();
            assert_eq!(peer, client.local_addr().unwrap());
        }
    }

    #[test]
    fn an_ip_address_names_itself_and_a_bad_one_says_what_is_expected() {
        let addr = ListenAddr::parse("127.0.0.1:9090").unwrap();
        assert_eq!(addr.addrs(), ["127.0.0.1:9090".parse().unwrap()]);
        assert_eq!(addr.to_string(), "127.0.0.1:9090");
        let error = ListenAddr::parse("localhost").unwrap_err();
        assert!(error.contains("HOST:PORT"), "{error}");
    }
}
