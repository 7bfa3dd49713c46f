//! The contracted rate (`MSGW_SANDBOX_RATE`): operations over it in one second are
//! refused whole with HTTP 429 and `Retry-After`, as a gateway enforcing a contract would.

use std::time::Duration;

use crate::common::*;
use msgw::sandbox::SandboxConfig;
use serde_json::{Value, json};

/// A sandbox that accepts `rate` operations a second.
async fn limited(rate: u32) -> TestSandbox {
    spawn_sandbox(SandboxConfig {
        rate: Some(rate),
        ..test_config()
    })
    .await
}

/// POSTs an envelope of `ops` with `auth`; the HTTP status, `Retry-After` in seconds
/// and the body.
async fn post(sb: &TestSandbox, auth: &str, ops: Vec<Value>) -> (u16, Option<u64>, Value) {
    let resp = sb
        .client
        .post(&sb.url)
        .header("Content-Type", "application/json")
        .body(json!({"auth": auth, "data": ops}).to_string())
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().parse().expect("Retry-After in seconds"));
    (status, retry_after, resp.json().await.unwrap())
}

fn sends(ids: std::ops::RangeInclusive<u64>) -> Vec<Value> {
    ids.map(|id| sms(id, 380971234567)).collect()
}

fn too_many() -> Value {
    json!({"success": false, "error": "Too many requests"})
}

#[tokio::test]
async fn operations_over_the_rate_are_refused_whole_with_429_until_the_window_passes() {
    let sb = limited(5).await;
    let key = sb.sandbox.api_key().to_owned();
    let (status, retry_after, reply) = post(&sb, &key, sends(1..=3)).await;
    assert_eq!((status, retry_after), (200, None), "{reply}");
    assert_eq!(reply["data"].as_array().unwrap().len(), 3, "{reply}");
    let balance = sb.sandbox.balance();
    assert_eq!(balance, 997.0);

    // Three more in the same second would make six: none of them is sent or billed.
    let (status, retry_after, reply) = post(&sb, &key, sends(4..=6)).await;
    assert_eq!(status, 429);
    assert_eq!(reply, too_many());
    // Within a one-second window, room always comes within the next second.
    let retry_after = retry_after.expect("a 429 says when to retry");
    assert_eq!(retry_after, 1);
    assert_eq!(
        sb.sandbox.balance(),
        balance,
        "a refused envelope is not billed"
    );

    // Once the window has room, the same envelope goes through, and nothing of the
    // refused one was kept: ids 4 to 6 are new messages.
    tokio::time::sleep(Duration::from_secs(retry_after)).await;
    let (status, _, reply) = post(&sb, &key, sends(4..=6)).await;
    assert_eq!(status, 200, "{reply}");
    assert!(
        reply["data"]
            .as_array()
            .unwrap()
            .iter()
            .all(|item| item["success"] == true),
        "{reply}"
    );
    assert_eq!(sb.sandbox.balance(), 994.0);
    sb.stop().await;
}

#[tokio::test]
async fn refused_envelopes_do_not_count_and_auth_comes_first() {
    let sb = limited(2).await;
    let key = sb.sandbox.api_key().to_owned();
    let balance = || json!({"type": "balance"});
    // Larger than the rate: never accepted, even in an empty window, and not counted.
    let (status, retry_after, reply) = post(&sb, &key, vec![balance(); 3]).await;
    assert_eq!((status, retry_after, reply), (429, Some(1), too_many()));
    let (status, _, reply) = post(&sb, &key, vec![balance(); 2]).await;
    assert_eq!(status, 200, "{reply}");
    // The window is full; a wrong key and a wrong content type are still told so first.
    let (status, retry_after, reply) = post(&sb, "wrong", vec![balance()]).await;
    assert_eq!(
        (status, retry_after, reply),
        (
            200,
            None,
            json!({"success": false, "error": "Access denied"})
        )
    );
    let reply = sb
        .post_raw(
            Some("text/plain"),
            json!({"auth": key, "data": [balance()]}).to_string(),
        )
        .await;
    assert_eq!(reply["error"], "Content-Type must be application/json");
    let (status, _, reply) = post(&sb, &key, vec![balance()]).await;
    assert_eq!((status, reply), (429, too_many()));
    sb.stop().await;
}

#[tokio::test]
async fn without_a_rate_nothing_is_refused() {
    let sb = spawn_sandbox(test_config()).await;
    let key = sb.sandbox.api_key().to_owned();
    for _ in 0..3 {
        let (status, _, reply) = post(&sb, &key, vec![json!({"type": "balance"}); 100]).await;
        assert_eq!(status, 200, "{reply}");
    }
    sb.stop().await;
}
