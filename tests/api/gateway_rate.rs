//! A gateway's contracted rate, played by the built-in sandbox (`MSGW_SANDBOX_RATE`):
//! a request refused with HTTP 429 sent nothing, so callers get `UNAVAILABLE`
//! `UPSTREAM_RATE_LIMITED` with `RetryInfo`, and a retry with the same id sends once.

use std::time::Duration;

use msgw::transport::proto::*;
use tonic::Code;
use tonic_types::StatusExt;

use crate::builders::sms;
use crate::helpers::{Options, TestApp, error_info, spawn};

/// The amount `GetBalance` answers.
async fn balance(app: &TestApp) -> google_type::Money {
    app.account()
        .get_balance(GetBalanceRequest {})
        .await
        .expect("balance")
        .into_inner()
        .amount
        .expect("an amount")
}

/// The messages of client id `id` the sandbox received, from its inbox.
async fn received(app: &TestApp, id: u64) -> Vec<serde_json::Value> {
    let url = format!("http://{}/sandbox/api/messages?id={id}", app.admin_addr);
    let inbox: serde_json::Value = reqwest::get(url).await.unwrap().json().await.unwrap();
    inbox["messages"].as_array().expect("messages").clone()
}

#[tokio::test]
async fn a_send_over_the_gateways_rate_is_unavailable_and_its_retry_sends_once() {
    let app = spawn(Options {
        sandbox_step: Some(Duration::from_millis(5)),
        sandbox_rate: Some(2),
        ..Options::default()
    })
    .await;
    // A balance query and a send fill the second; the next send is over the rate.
    let before = balance(&app).await;
    app.messaging()
        .send_sms(sms(30))
        .await
        .expect("within the rate");
    let status = app.messaging().send_sms(sms(31)).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    let (reason, metadata) = error_info(&status);
    assert_eq!(
        (reason.as_str(), metadata["cause"].as_str()),
        ("UPSTREAM_RATE_LIMITED", "rate_limited")
    );
    let delay = status
        .get_details_retry_info()
        .and_then(|info| info.retry_delay)
        .expect("RetryInfo");
    assert_eq!(delay, Duration::from_secs(1), "the sandbox's Retry-After");
    assert!(received(&app, 31).await.is_empty(), "nothing was sent");

    // Nothing was sent, so the id is free: the retry after the delay is sent, once.
    tokio::time::sleep(delay).await;
    let sent = app.messaging().send_sms(sms(31)).await.expect("retry sent");
    assert!(sent.metadata().get("msgw-replayed").is_none());
    let receipt = sent.into_inner().receipt.expect("receipt");
    let replay = app.messaging().send_sms(sms(31)).await.expect("replayed");
    assert_eq!(
        replay.into_inner().receipt.expect("receipt").msg_id,
        receipt.msg_id
    );
    // The sandbox keeps one record per id; the balance tells how often it was billed.
    let messages = received(&app, 31).await;
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert_eq!(
        messages[0]["msg_id"].to_string().trim_matches('"'),
        receipt.msg_id
    );
    let after = balance(&app).await;
    assert_eq!(
        (before.units - after.units, before.nanos - after.nanos),
        (2, 0),
        "billed once each: 30 and 31, one SMS part apiece"
    );
}
