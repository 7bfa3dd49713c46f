//! Coalescing: concurrent calls share gateway envelopes over a bounded number of
//! requests in flight, each operation keeps its own result, deadline and
//! idempotency, and a full queue refuses instead of growing.

use std::{collections::HashMap, time::Duration};

use msgw::{
    core::dispatch::Limits,
    transport::proto::{BatchItem, BatchRequest, GetBalanceRequest, batch_item::Operation as Item},
};
use serde_json::{Value, json};
use tonic::{Code, Request};
use tonic_types::StatusExt;

use super::builders::sms;
use super::helpers::{Options, Reply, TestApp, error_info, spawn, violations};

/// After `latency`, accepts every send with msg id `id * 10`, except sends signed
/// `bad` (`Error in Sender-name`); other operations get their usual answers.
fn gateway(latency: Duration) -> impl Fn(&Value) -> Reply + Send + Sync + 'static {
    move |body: &Value| {
        let items = body["data"].as_array().cloned().unwrap_or_default();
        let results: Vec<Value> = items
            .iter()
            .map(|item| match item["type"].as_str() {
                Some("sms") if item["sms_signature"] == json!("bad") => {
                    json!({"success": false, "error": "Error in Sender-name", "data": {"id": item["id"]}})
                }
                Some("sms") => {
                    let id = item["id"].as_u64().unwrap_or_default();
                    json!({"success": true, "data": {"id": id, "msg_id": id * 10, "data": 1, "parts": 1}})
                }
                Some("balance") => {
                    json!({"success": true, "data": {"amount": 10.5, "currency": "UAH"}})
                }
                other => json!({"success": false, "error": format!("unexpected {other:?}")}),
            })
            .collect();
        Reply::After(
            latency,
            Box::new(Reply::Json(json!({"success": true, "data": results}))),
        )
    }
}

async fn app(limits: Limits, latency: Duration) -> TestApp {
    let app = spawn(Options {
        limits,
        ..Options::default()
    })
    .await;
    app.gateway.respond_with(gateway(latency));
    app
}

fn limits(connections: usize, batch_max: usize, queue_max: usize) -> Limits {
    Limits {
        rate: None,
        burst: None,
        bulk_share: 0.1,
        connections,
        batch_max,
        queue_max,
    }
}

/// Starts a send that holds the only connection for the gateway's latency, and waits
/// until the gateway has it.
async fn occupy(app: &TestApp, id: u64) -> tokio::task::JoinHandle<Result<u64, Code>> {
    let mut client = app.messaging();
    let call = tokio::spawn(async move {
        client
            .send_sms(sms(id))
            .await
            .map(|r| r.into_inner().receipt.unwrap().id)
            .map_err(|s| s.code())
    });
    app.gateway.first_request().await;
    call
}

/// Waits until `n` calls queue in msgw behind the busy connection.
async fn queued(app: &TestApp, n: usize) {
    for _ in 0..500 {
        let depth = app.metric("msgw_upstream_queue_operations").await;
        if depth.is_some_and(|d| d >= n as f64) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{n} calls never queued");
}

#[tokio::test]
async fn concurrent_calls_share_an_envelope_and_each_gets_its_own_result() {
    let app = app(limits(1, 50, 10_000), Duration::from_millis(150)).await;
    let first = occupy(&app, 1).await;
    let calls: Vec<_> = (100..120u64)
        .map(|id| {
            let mut client = app.messaging();
            let mut request = sms(id);
            if id == 107 {
                request.signature = "bad".into();
            }
            tokio::spawn(async move { client.send_sms(request).await })
        })
        .collect();
    queued(&app, 20).await;
    assert_eq!(first.await.unwrap(), Ok(1));
    for (id, call) in (100..120u64).zip(calls) {
        let result = call.await.unwrap();
        if id == 107 {
            let status = result.expect_err("the rejected send fails alone");
            assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
            let (reason, metadata) = error_info(&status);
            assert_eq!(reason, "UPSTREAM_REJECTED");
            assert_eq!(metadata["upstream_error"], "Error in Sender-name");
        } else {
            let receipt = result.expect("send ok").into_inner().receipt.unwrap();
            assert_eq!((receipt.id, receipt.msg_id), (id, (id * 10).to_string()));
        }
    }
    let sizes: Vec<usize> = app.gateway.envelopes().iter().map(Vec::len).collect();
    assert_eq!(
        sizes,
        vec![1, 20],
        "the lone call, then one shared envelope"
    );
}

#[tokio::test]
async fn a_lone_call_goes_at_once_in_an_envelope_of_its_own() {
    let app = app(Limits::default(), Duration::ZERO).await;
    app.messaging().send_sms(sms(5)).await.expect("send ok");
    let envelopes = app.gateway.envelopes();
    assert_eq!(envelopes.len(), 1);
    assert_eq!(envelopes[0].len(), 1);
    assert_eq!(envelopes[0][0]["id"], json!(5));
}

#[tokio::test]
async fn a_batch_keeps_its_items_in_one_envelope_and_is_bounded_by_the_batch_max() {
    let app = app(limits(1, 4, 100), Duration::from_millis(100)).await;
    let first = occupy(&app, 1).await;
    let batch = |ids: std::ops::Range<u64>| BatchRequest {
        items: ids
            .map(|id| BatchItem {
                operation: Some(Item::SendSms(sms(id))),
            })
            .collect(),
    };
    let (mut a, mut b) = (app.messaging(), app.messaging());
    let (three, two) = tokio::join!(a.batch(batch(10..13)), b.batch(batch(20..22)));
    first.await.unwrap().unwrap();
    assert_eq!(three.unwrap().into_inner().results.len(), 3);
    assert_eq!(two.unwrap().into_inner().results.len(), 2);
    let mut ids: Vec<Vec<u64>> = app
        .gateway
        .envelopes()
        .iter()
        .skip(1)
        .map(|e| e.iter().map(|op| op["id"].as_u64().unwrap()).collect())
        .collect();
    ids.sort();
    assert_eq!(
        ids,
        vec![vec![10, 11, 12], vec![20, 21]],
        "3 + 2 > 4: two envelopes, neither split"
    );

    let status = app.messaging().batch(batch(30..35)).await.unwrap_err();
    assert_eq!(violations(&status), vec!["items"]);
    assert!(status.message().contains("at most 4 items"), "{status:?}");
}

#[tokio::test]
async fn a_call_whose_deadline_passes_in_the_queue_is_not_sent() {
    let app = app(limits(1, 50, 10_000), Duration::from_millis(1500)).await;
    let first = occupy(&app, 1).await;
    let mut request = Request::new(sms(2));
    // Well inside the first call's 1.5 s. Shorter deadlines (100 ms, then 250 ms) were
    // answered by the client's own timer in full CI runs, msgw's answer arriving later.
    request.set_timeout(Duration::from_millis(700));
    let status = app.messaging().send_sms(request).await.unwrap_err();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    let (reason, _) = error_info(&status);
    assert_eq!(
        reason, "UPSTREAM_DEADLINE",
        "not sent, so not OUTCOME_UNKNOWN"
    );
    assert_eq!(
        app.gateway.envelopes().len(),
        1,
        "only the first call was sent"
    );

    // Its claim was given back: a retry at once, while the connection is still busy,
    // is sent once the connection frees, and only then.
    let response = app.messaging().send_sms(sms(2)).await.unwrap();
    assert!(response.metadata().get("msgw-replayed").is_none());
    first.await.unwrap().unwrap();
    assert_eq!(app.gateway.envelopes().len(), 2);
}

#[tokio::test]
async fn a_full_queue_answers_resource_exhausted_with_retry_info() {
    let app = app(limits(1, 1, 2), Duration::from_millis(300)).await;
    let first = occupy(&app, 1).await;
    let waiting: Vec<_> = (2..4u64)
        .map(|id| {
            let mut client = app.messaging();
            tokio::spawn(async move { client.send_sms(sms(id)).await })
        })
        .collect();
    queued(&app, 2).await;
    let status = app.messaging().send_sms(sms(4)).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    let (reason, _) = error_info(&status);
    assert_eq!(reason, "QUEUE_FULL");
    assert!(status.get_details_retry_info().is_some(), "{status:?}");
    first.await.unwrap().unwrap();
    for call in waiting {
        call.await.unwrap().expect("queued calls still go out");
    }
    assert_eq!(
        app.metric("msgw_upstream_queue_rejected_total").await,
        Some(1.0)
    );
    // The refused id was never claimed: it can be sent later.
    app.messaging().send_sms(sms(4)).await.expect("sent later");
}

#[tokio::test]
async fn gateway_requests_in_flight_never_exceed_the_bound() {
    let app = app(limits(3, 5, 10_000), Duration::from_millis(30)).await;
    let calls: Vec<_> = (1..=100u64)
        .map(|id| {
            let mut client = app.messaging();
            tokio::spawn(async move { client.send_sms(sms(id)).await })
        })
        .collect();
    for call in calls {
        call.await.unwrap().expect("send ok");
    }
    let envelopes = app.gateway.envelopes();
    assert!(
        app.gateway.most_concurrent() <= 3,
        "{}",
        app.gateway.most_concurrent()
    );
    assert!(envelopes.iter().all(|e| e.len() <= 5), "{envelopes:?}");
    assert_eq!(envelopes.iter().map(Vec::len).sum::<usize>(), 100);
    assert!(envelopes.len() < 100, "nothing was coalesced");
}

#[tokio::test]
async fn idempotency_holds_under_coalescing() {
    let app = app(limits(4, 50, 10_000), Duration::from_millis(20)).await;
    let calls: Vec<_> = (0..200u64)
        .map(|n| {
            let id = 1000 + n % 40;
            let mut client = app.messaging();
            tokio::spawn(async move { (id, client.send_sms(sms(id)).await) })
        })
        .collect();
    let mut msg_ids: HashMap<u64, String> = HashMap::new();
    for call in calls {
        let (id, result) = call.await.unwrap();
        let msg_id = result
            .expect("every duplicate gets the answer")
            .into_inner()
            .receipt
            .unwrap()
            .msg_id;
        assert_eq!(msg_ids.entry(id).or_insert_with(|| msg_id.clone()), &msg_id);
    }
    let sent: Vec<u64> = app
        .gateway
        .envelopes()
        .iter()
        .flatten()
        .map(|op| op["id"].as_u64().unwrap())
        .collect();
    let mut distinct = sent.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(sent.len(), 40, "each id sent once: {sent:?}");
    assert_eq!(distinct.len(), 40);
}

#[tokio::test]
async fn an_envelope_failure_gives_each_call_its_own_outcome() {
    let app = app(limits(1, 50, 10_000), Duration::from_millis(150)).await;
    let first = occupy(&app, 1).await;
    app.gateway
        .respond_with(|_| Reply::Http(502, "bad gateway"));
    let (mut a, mut b) = (app.messaging(), app.account());
    let send = tokio::spawn(async move { a.send_sms(sms(2)).await });
    let balance = tokio::spawn(async move { b.get_balance(GetBalanceRequest {}).await });
    queued(&app, 2).await;
    first.await.unwrap().unwrap();
    let send = send.await.unwrap().unwrap_err();
    let balance = balance.await.unwrap().unwrap_err();
    assert_eq!(
        app.gateway.envelopes()[1].len(),
        2,
        "both rode one envelope"
    );
    assert_eq!(send.code(), Code::Unavailable);
    assert_eq!(error_info(&send).0, "OUTCOME_UNKNOWN");
    assert_eq!(balance.code(), Code::Unavailable);
    assert_eq!(
        error_info(&balance).0,
        "UPSTREAM_UNAVAILABLE",
        "a query changes nothing"
    );
}
