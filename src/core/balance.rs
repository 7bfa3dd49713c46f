//! The balance gauge: msgw reads the account balance periodically, so operators can
//! alert before sends start failing for lack of funds. Replicas sharing a store take
//! turns: the one holding the lease reads and exports the gauge, the others export
//! none (so `max(msgw_balance)` over the replicas is the balance).

use std::time::Duration;

use crate::core::dispatch::Dispatcher;
use crate::core::domain::{Operation, Output};
use crate::core::periodic::{Leased, Periodic};

/// Reads the balance every `every` into the `msgw_balance` gauge until `stop`
/// turns true, on the replica holding the balance lease; a zero period turns it off.
pub async fn refresh(
    dispatcher: Dispatcher,
    every: Duration,
    lease: Leased,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    if every.is_zero() {
        return;
    }
    let metrics = dispatcher.metrics().clone();
    let mut ticks = Periodic::new(every, stop);
    while ticks.next().await {
        if !lease.held().await {
            // Another replica reads it: a gauge left here would go stale.
            metrics.balance.reset();
            continue;
        }
        match dispatcher
            .execute(Operation::GetBalance, None)
            .await
            .map(|executed| executed.output)
        {
            Ok(Output::Balance(b)) => {
                metrics
                    .balance
                    .with_label_values(&[&b.amount.currency])
                    .set(b.amount.to_f64());
                metrics
                    .balance_refreshed
                    .set(chrono::Utc::now().timestamp() as f64);
            }
            Ok(other) => tracing::warn!(?other, "balance refresh: unexpected answer"),
            Err(e) => tracing::warn!(error = %e, "balance refresh failed"),
        }
    }
}
