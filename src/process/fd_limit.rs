//! The process's file limit (`RLIMIT_NOFILE`) and how msgw shares it out.
//!
//! Every connection costs a file descriptor. When they run out, every port stops
//! accepting and even a reload of the callers file fails, so msgw raises its soft
//! limit to the hard one at start and caps the gRPC port below what is left once
//! everything else has its share.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Files kept for everything but connections: the store (SQLite's database, WAL and
/// shared-memory files per pooled connection, or PostgreSQL's pool), the admin port
/// ([`ADMIN_CONNECTIONS`](crate::transport::admin::ADMIN_CONNECTIONS)), certificates, the callers file, the sandbox, logs.
pub const RESERVED: u64 = 256;

/// The gRPC port's cap when nothing else is known (no file limit can be read).
const UNLIMITED_GRPC: usize = 65_536;

/// The smallest gRPC share that is worth starting with.
const MIN_GRPC: usize = 16;

/// Raises the soft file limit to the hard limit; returns the soft limit now in force
/// (`None`: unlimited or unreadable).
pub fn raise() -> Option<u64> {
    let limit = getrlimit(Resource::Nofile);
    if limit.maximum != limit.current {
        let raised = Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        if let Err(error) = setrlimit(Resource::Nofile, raised) {
            tracing::warn!(%error, soft = ?limit.current, hard = ?limit.maximum, "cannot raise the file limit");
        }
    }
    getrlimit(Resource::Nofile).current
}

/// The most connections a port (the gRPC port, an HTTP listener) holds at once under a
/// cap of `cap`, those still closing included (see [`crate::transport::conn_table`]).
pub fn ceiling(cap: usize) -> usize {
    cap + cap / crate::transport::conn_table::CLOSING_SHARE + 1
}

/// The largest cap whose [`ceiling`] fits in `files` (0: none does).
fn fitting(files: usize) -> usize {
    (1..=files)
        .rev()
        .find(|&c| ceiling(c) <= files)
        .unwrap_or(0)
}

/// How the file limit is shared between the two ports that face many clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shares {
    /// gRPC connections at most.
    pub grpc: usize,
    /// Webhook connections at most (lowered from the configured value when it does
    /// not fit).
    pub webhook: usize,
}

/// Shares out `limit` (the soft file limit; `None`: unlimited): [`RESERVED`] and one
/// per gateway connection first, then the webhook listener (at most a quarter of the
/// rest when the gRPC cap is derived) and the gRPC port; the connections still closing
/// of either may exceed its cap by an eighth ([`ceiling`]).
///
/// `grpc`: the configured cap (`MSGW_GRPC_MAX_CONNECTIONS`), if any.
pub fn share(
    limit: Option<u64>,
    upstream_connections: usize,
    grpc: Option<usize>,
    webhook: usize,
) -> Result<Shares, String> {
    let Some(limit) = limit else {
        return Ok(Shares {
            grpc: grpc.unwrap_or(UNLIMITED_GRPC),
            webhook,
        });
    };
    let reserved = RESERVED + upstream_connections as u64;
    let available = usize::try_from(limit.saturating_sub(reserved)).unwrap_or(usize::MAX);
    let least = reserved + (MIN_GRPC + 1) as u64;
    if available < MIN_GRPC + 1 {
        return Err(format!(
            "the file limit ({limit}) is too low for msgw: it needs at least {least} (ulimit -n {least}, or the container's nofile limit)"
        ));
    }
    match grpc {
        None => {
            let webhook = webhook.min(fitting(available / 4)).max(1);
            let grpc = fitting(available - ceiling(webhook)).max(1);
            Ok(Shares { grpc, webhook })
        }
        Some(grpc) if ceiling(grpc) + ceiling(1) <= available => Ok(Shares {
            grpc,
            webhook: webhook.min(fitting(available - ceiling(grpc))),
        }),
        Some(grpc) => {
            let most = fitting(available - ceiling(1)).max(1);
            Err(format!(
                "MSGW_GRPC_MAX_CONNECTIONS={grpc} does not fit the file limit ({limit}): at most {most} once msgw's own {reserved} files, connections still closing and the webhook listener are counted; raise the limit (ulimit -n) or lower MSGW_GRPC_MAX_CONNECTIONS"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_derived_cap_leaves_room_for_everything_else() {
        let shares = share(Some(20_000), 8, None, 1024).unwrap();
        assert_eq!(shares.webhook, 1024);
        let left = 20_000 - 256 - 8 - ceiling(1024);
        assert!(ceiling(shares.grpc) <= left);
        assert!(ceiling(shares.grpc + 1) > left);
        // A low limit: the webhook listener gets a quarter of what is left, closing
        // connections included.
        let shares = share(Some(1024), 8, None, 1024).unwrap();
        assert_eq!(ceiling(shares.webhook), (1024 - 264) / 4);
        assert!(ceiling(shares.grpc) + ceiling(shares.webhook) <= 1024 - 264);
        assert_eq!(share(None, 8, None, 1024).unwrap().grpc, UNLIMITED_GRPC);
    }

    #[test]
    fn a_configured_cap_must_fit_the_limit() {
        let shares = share(Some(1024), 8, Some(600), 1024).unwrap();
        assert_eq!(shares.grpc, 600);
        assert_eq!(ceiling(shares.webhook), 1024 - 264 - ceiling(600));
        let error = share(Some(1024), 8, Some(5000), 1024).unwrap_err();
        assert!(error.contains("MSGW_GRPC_MAX_CONNECTIONS=5000"), "{error}");
        assert!(error.contains("ulimit -n"), "{error}");
        let error = share(Some(200), 8, None, 1024).unwrap_err();
        assert!(error.contains("too low"), "{error}");
    }
}
