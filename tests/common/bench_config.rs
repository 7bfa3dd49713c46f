//! msgw's configuration for a benchmark that times the send path alone: retention,
//! reconcile and the first poll an hour away, so no background work runs during it.
#![allow(dead_code)]

use std::time::Duration;

use msgw::{
    core::ports::store::Retention,
    core::reconcile::ReconcileConfig,
    process::config::{Config, Upstream},
};

/// msgw in front of the gateway at `gateway_url`, on the store `store_url`.
pub fn quiet(gateway_url: &str, store_url: &str) -> anyhow::Result<Config> {
    let hour = Duration::from_secs(3600);
    Ok(Config {
        retention: Retention {
            max_age: hour,
            max_events: 10_000_000,
            claims_max_age: Duration::from_secs(7 * 86_400),
            guard_max_age: hour,
            trusted_keys_max_age: hour,
        },
        reconcile: ReconcileConfig {
            interval: hour,
            first_after: hour,
            max_backoff: hour,
        },
        upstream_timeout: Duration::from_secs(5),
        ..Config::for_tests(
            Upstream::Gateway {
                url: gateway_url.parse()?,
                api_key: "bench-key".to_owned().into(),
            },
            store_url.to_owned(),
        )
    })
}
