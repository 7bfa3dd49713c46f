//! What the machine allows msgw's ports: the open-file limit shared among the gateway's
//! connections and the two listeners, and the gRPC port's memory budget and connection
//! cap, from msgw's own memory limit unless configured.

use crate::process::config::Config;
use crate::process::fd_limit::{self, Shares};

/// The file limit, raised as far as allowed, and its shares.
pub(super) struct Files {
    /// The limit, if it could be read.
    pub(super) limit: Option<u64>,
    pub(super) shares: Shares,
}

/// Raises the open-file limit and shares it out; a webhook connection cap the share
/// cannot hold is lowered to it (with a warning), a gRPC one is resolved in [`grpc_port`].
pub(super) fn files(config: &mut Config) -> anyhow::Result<Files> {
    let limit = fd_limit::raise();
    let shares = fd_limit::share(
        limit,
        config.upstream_limits.connections,
        config.grpc_limits.max_connections,
        config.webhook_limits.max_connections,
    )
    .map_err(anyhow::Error::msg)?;
    if shares.webhook < config.webhook_limits.max_connections {
        tracing::warn!(
            file_limit = limit,
            webhook_max_connections = shares.webhook,
            "the file limit is low: the webhook listener takes fewer connections than MSGW_WEBHOOK_MAX_CONNECTIONS"
        );
        config.webhook_limits.max_connections = shares.webhook;
    }
    Ok(Files { limit, shares })
}

/// The gRPC port's resolved bounds.
pub(super) struct GrpcBounds {
    pub(super) max_connections: usize,
    pub(super) memory_budget: usize,
}

/// The gRPC port's memory budget (configured, else a share of msgw's memory limit: its
/// cgroup's, v2 else v1, else the machine's) and connection cap (configured, else the
/// connections whose fixed costs fit in half the budget; never more than the file
/// limit's share). Logged, with the port's other bounds.
pub(super) fn grpc_port(config: &Config, files: &Files) -> GrpcBounds {
    let memory = crate::process::memory::find();
    match &memory {
        Some(found) => tracing::info!(
            memory_limit = found.bytes,
            from = %found.from,
            "memory limit found"
        ),
        None => tracing::warn!("no memory limit found (no cgroup limit, no /proc/meminfo)"),
    }
    let memory_limit = memory.map(|found| found.bytes);
    let limits = &config.grpc_limits;
    let memory_budget = limits
        .memory_budget
        .or(memory_limit.map(|limit| limit / crate::process::memory::GRPC_SHARE))
        .map_or(usize::MAX, |b| usize::try_from(b).unwrap_or(usize::MAX));
    let max_connections = match limits.max_connections {
        Some(_) => files.shares.grpc,
        None => files
            .shares
            .grpc
            .min(crate::transport::conn_table::connections_within(
                memory_budget,
            )),
    };
    tracing::info!(
        max_connections,
        memory_budget,
        memory_limit,
        send_timeout = ?limits.send_timeout,
        file_limit = files.limit,
        handshake_timeout = ?limits.handshake_timeout,
        idle_timeout = ?limits.idle_timeout,
        "gRPC port bounds"
    );
    GrpcBounds {
        max_connections,
        memory_budget,
    }
}
