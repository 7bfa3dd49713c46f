//! How many gateway requests, and operations, msgw allows itself, and the contracted
//! rate: `msgw serve`'s `--upstream-*` options.

use crate::base::parse;
use crate::core::domain::RateLimit;

/// How many gateway requests, and operations, msgw allows itself: `msgw serve`'s
/// `--upstream-*` options.
#[derive(Debug, Clone, Copy, PartialEq, clap::Args)]
pub struct Limits {
    /// Gateway requests in flight at most, and so connections to the gateway. Calls that
    /// arrive while all are busy queue and go out together in the next free one.
    #[arg(long = "upstream-connections", env = "MSGW_UPSTREAM_CONNECTIONS", default_value = "8", value_parser = parse::between(1usize, 1024))]
    pub connections: usize,
    /// Operations in one gateway request at most; must not exceed what the gateway
    /// accepts in one request. Also the most items of one `Batch` call.
    #[arg(long = "upstream-batch-max", env = "MSGW_UPSTREAM_BATCH_MAX", default_value = "50", value_parser = parse::between(1usize, 1000))]
    pub batch_max: usize,
    /// Operations waiting for a gateway request at most (not fewer than
    /// --upstream-batch-max); calls beyond it are refused with RESOURCE_EXHAUSTED (and
    /// RetryInfo), so overload cannot grow memory.
    #[arg(long = "upstream-queue-max", env = "MSGW_UPSTREAM_QUEUE_MAX", default_value = "10000", value_parser = parse::between(1usize, 1_000_000))]
    pub queue_max: usize,
    /// Operations per second the whole deployment may send to the gateway (every
    /// replica on one PostgreSQL store together); unset: no limit. Operations count one
    /// each, whatever envelope carries them.
    #[arg(long = "upstream-rate", env = "MSGW_UPSTREAM_RATE", value_parser = parse::between(1u32, 100_000))]
    pub rate: Option<u32>,
    /// Operations that may leave at once under --upstream-rate (1 to the rate); unset:
    /// one second's worth.
    #[arg(long = "upstream-burst", env = "MSGW_UPSTREAM_BURST", value_parser = parse::between(1u32, 100_000))]
    pub burst: Option<u32>,
    /// The least share of what leaves that each lower priority lane (normal, bulk) gets
    /// while the lanes above it are busy, 0 to 0.5.
    #[arg(long = "upstream-bulk-share", env = "MSGW_UPSTREAM_BULK_SHARE", default_value = "0.1", value_parser = parse::share_at_most(0.5))]
    pub bulk_share: f64,
}

impl Limits {
    /// The contracted rate, when one is set.
    pub fn rate_limit(&self) -> Option<RateLimit> {
        self.rate.map(|rate| RateLimit::new(rate, self.burst))
    }

    /// Operations of one call in the queue at most: a batch, and under a rate a tenth
    /// of a second's worth, so a large `Batch` leaves in paced parts beside everything
    /// else rather than waiting for a whole second's room (which other replicas' sends
    /// would never leave it).
    pub fn chunk_max(&self) -> usize {
        match self.rate_limit() {
            Some(limit) => self.batch_max.min(limit.tenth() as usize).max(1),
            None => self.batch_max,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        parse::defaults()
    }
}
