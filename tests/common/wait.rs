//! Waiting for something to happen, never for a fixed time: a condition looked at
//! every few milliseconds until it holds, and a test that fails saying what never
//! happened once its deadline passes.
#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// How often a condition is looked at.
const EVERY: Duration = Duration::from_millis(5);

/// Waits until `done` holds; fails the test with `failure` after `within`.
pub async fn until(within: Duration, failure: &str, mut done: impl FnMut() -> bool) {
    until_some(within, failure, || std::future::ready(done().then_some(()))).await;
}

/// Waits until `check` gives a value, and gives it; fails the test with `failure`
/// after `within`.
pub async fn until_some<T, F>(within: Duration, failure: &str, mut check: impl FnMut() -> F) -> T
where
    F: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "{failure} (waited {within:?})");
        tokio::time::sleep(EVERY).await;
    }
}
