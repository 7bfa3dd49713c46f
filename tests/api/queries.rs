//! Queries reach the gateway once: status queries of one id at once share one gateway
//! lookup, a final status msgw holds is answered from its store, a status asked again
//! within `MSGW_STATUS_FRESHNESS` is the last lookup's, and GetBalance is shared and
//! kept the same way; every answer says where it came from (`msgw-answer-source`). A
//! caller's `queries_per_second` refuses calls that send nothing beyond it.

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use msgw::transport::proto::{
    BatchItem, BatchRequest, BatchResult, GetBalanceRequest, GetMessageStatusRequest,
    ListSendersRequest, StreamStatusEventsRequest, batch_item, batch_result,
};
use serde_json::{Value, json};
use tonic_types::StatusExt;

use crate::helpers::{
    Callers, Entry, Options, Reply, TestApp, as_caller, default_reply, error_info, spawn, spawn_app,
};

/// The gateway's requests so far that carry an operation of `kind` (`status`, `balance`).
fn lookups(app: &TestApp, kind: &str) -> usize {
    app.gateway
        .envelopes()
        .iter()
        .filter(|ops| ops.iter().any(|op| op["type"] == kind))
        .count()
}

/// The gateway answers every status query `ACCEPTED` (not final), after `latency`.
fn accepted_after(app: &TestApp, latency: Duration) {
    app.gateway.respond_with(move |body: &Value| {
        let items = body["data"].as_array().cloned().unwrap_or_default();
        let results: Vec<Value> = items
            .iter()
            .map(|item| match item["type"].as_str() {
                Some("status") => json!({"success": true, "data":
                    {"id": item["id"], "msg_id": 99, "type": "sms", "status": "ACCEPTED"}}),
                _ => json!({"success": true, "data": {"amount": 31.1683, "currency": "UAH"}}),
            })
            .collect();
        Reply::After(
            latency,
            Box::new(Reply::Json(json!({"success": true, "data": results}))),
        )
    });
}

/// Where an answer came from, as its metadata says.
fn source<T>(response: &tonic::Response<T>) -> String {
    response
        .metadata()
        .get("msgw-answer-source")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("(none)")
        .to_owned()
}

fn status_of(id: u64) -> GetMessageStatusRequest {
    GetMessageStatusRequest {
        id,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_status_queries_of_one_id_at_once_make_one_gateway_lookup() {
    let app = spawn_app().await;
    accepted_after(&app, Duration::from_millis(300));
    let answers = join_all((0..200).map(|_| {
        let mut client = app.messaging();
        async move { client.get_message_status(status_of(4242)).await }
    }))
    .await;
    let mut sources = Vec::new();
    for answer in answers {
        let answer = answer.expect("every query is answered");
        sources.push(source(&answer));
        assert_eq!(answer.get_ref().raw_status, "ACCEPTED");
    }
    assert_eq!(lookups(&app, "status"), 1, "{sources:?}");
    assert_eq!(sources.iter().filter(|s| *s == "lookup").count(), 1);
    assert!(
        sources
            .iter()
            .all(|s| ["lookup", "shared-lookup", "cache"].contains(&s.as_str())),
        "{sources:?}"
    );
    let counted = app
        .metric_sum("msgw_status_answers_total", &[r#"source="lookup""#])
        .await;
    assert_eq!(counted, 1.0);
    let shared = app
        .metric_sum("msgw_status_answers_total", &[r#"source="shared-lookup""#])
        .await
        + app
            .metric_sum("msgw_status_answers_total", &[r#"source="cache""#])
            .await;
    assert_eq!(shared, 199.0);
}

#[tokio::test]
async fn six_hundred_status_queries_of_one_id_in_a_row_make_a_lookup_per_freshness_time() {
    let app = spawn_app().await;
    accepted_after(&app, Duration::ZERO);
    let mut client = app.messaging();
    let started = Instant::now();
    let mut cached = 0;
    for _ in 0..600 {
        let answer = client.get_message_status(status_of(77)).await.unwrap();
        cached += usize::from(source(&answer) == "cache");
    }
    let took = started.elapsed();
    let made = lookups(&app, "status");
    println!("600 status queries of one id in {took:?}: {made} gateway lookups");
    // One lookup per second of queries (MSGW_STATUS_FRESHNESS, 1 s), and the first.
    assert!(
        made <= took.as_secs() as usize + 1 && made <= 60,
        "{made} lookups in {took:?}"
    );
    assert_eq!(cached, 600 - made);
}

#[tokio::test]
async fn a_final_status_msgw_holds_is_answered_from_its_store_without_a_lookup() {
    let app = spawn_app().await;
    let delivered = json!({"success": true, "id": "5150", "msg_id": "m5150",
                           "type": "sms", "status": "DELIVERED"});
    assert_eq!(
        app.post_webhook(&app.hook_path(5150), delivered.to_string())
            .await,
        200
    );
    let answer = app
        .messaging()
        .get_message_status(status_of(5150))
        .await
        .unwrap();
    assert_eq!(source(&answer), "store");
    assert_eq!(answer.get_ref().raw_status, "DELIVERED");
    assert!(answer.get_ref().is_final);
    // A status msgw does not hold final is looked up, and is fresh a moment later.
    accepted_after(&app, Duration::ZERO);
    let first = app
        .messaging()
        .get_message_status(status_of(5151))
        .await
        .unwrap();
    let again = app
        .messaging()
        .get_message_status(status_of(5151))
        .await
        .unwrap();
    assert_eq!(
        (source(&first), source(&again)),
        ("lookup".into(), "cache".into())
    );
    assert_eq!(lookups(&app, "status"), 1);
    assert_eq!(
        app.metric_sum("msgw_status_answers_total", &[r#"source="store""#])
            .await,
        1.0
    );
    // "Not found" is kept as fresh as a status: an unknown id asked for twice in a
    // row is one lookup.
    app.gateway.respond_json(json!({"success": true, "data": [
        {"success": false, "error": "Message not found"}]}));
    for _ in 0..2 {
        let missing = app
            .messaging()
            .get_message_status(status_of(5152))
            .await
            .expect_err("the gateway does not know it");
        assert_eq!(missing.code(), tonic::Code::NotFound, "{missing:?}");
    }
    assert_eq!(lookups(&app, "status"), 2);
}

/// The gateway's status operations so far, over all its requests.
fn status_operations(app: &TestApp) -> usize {
    app.gateway
        .envelopes()
        .iter()
        .flatten()
        .filter(|op| op["type"] == "status")
        .count()
}

/// A Batch of a status item for each of `ids`.
fn status_batch(ids: &[u64]) -> BatchRequest {
    BatchRequest {
        items: ids
            .iter()
            .map(|id| BatchItem {
                operation: Some(batch_item::Operation::GetMessageStatus(status_of(*id))),
            })
            .collect(),
    }
}

/// A status item's raw status and where it came from; panics on a failed item.
fn status_item(result: &BatchResult) -> (String, String) {
    match &result.result {
        Some(batch_result::Result::GetMessageStatus(status)) => {
            (status.raw_status.clone(), result.answer_source.clone())
        }
        _ => panic!("not a status answer: {result:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twelve_batches_of_fifty_status_items_of_one_id_make_one_gateway_lookup() {
    let app = spawn_app().await;
    accepted_after(&app, Duration::from_millis(300));
    let answers = join_all((0..12).map(|_| {
        let mut client = app.messaging();
        async move { client.batch(status_batch(&[4343; 50])).await }
    }))
    .await;
    let mut sources = Vec::new();
    for answer in answers {
        let answer = answer.expect("every batch is answered");
        assert_eq!(
            source(&answer),
            "(none)",
            "a batch's items say it, not its metadata"
        );
        for result in &answer.get_ref().results {
            let (status, source) = status_item(result);
            assert_eq!(status, "ACCEPTED");
            sources.push(source);
        }
    }
    assert_eq!(sources.len(), 600);
    let (requests, operations) = (lookups(&app, "status"), status_operations(&app));
    println!(
        "12 batches x 50 status items of one id: {requests} gateway requests, {operations} status operations"
    );
    assert_eq!((requests, operations), (1, 1));
    assert_eq!(sources.iter().filter(|s| *s == "lookup").count(), 1);
    assert!(
        sources
            .iter()
            .all(|s| ["lookup", "shared-lookup", "cache"].contains(&s.as_str())),
        "{sources:?}"
    );
    assert_eq!(
        app.metric_sum("msgw_status_answers_total", &[r#"source="lookup""#])
            .await,
        1.0
    );
    let shared = app
        .metric_sum("msgw_status_answers_total", &[r#"source="shared-lookup""#])
        .await
        + app
            .metric_sum("msgw_status_answers_total", &[r#"source="cache""#])
            .await;
    assert_eq!(shared, 599.0);
}

#[tokio::test]
async fn a_batchs_status_items_are_answered_like_lone_queries_and_say_where_from() {
    let app = spawn_app().await;
    let delivered = json!({"success": true, "id": "5250", "msg_id": "m5250",
                           "type": "sms", "status": "DELIVERED"});
    assert_eq!(
        app.post_webhook(&app.hook_path(5250), delivered.to_string())
            .await,
        200
    );
    accepted_after(&app, Duration::ZERO);
    // 5251 was just looked up by a lone query: fresh.
    app.messaging()
        .get_message_status(status_of(5251))
        .await
        .unwrap();
    let before = app.gateway.requests().len();
    let mut batch = status_batch(&[5250, 5251, 5252, 5253, 5252]);
    batch.items.push(BatchItem {
        operation: Some(batch_item::Operation::GetBalance(GetBalanceRequest {})),
    });
    let answer = app.messaging().batch(batch).await.unwrap();
    let results = &answer.get_ref().results;
    let items: Vec<(String, String)> = results[..5].iter().map(status_item).collect();
    assert_eq!(
        items,
        [
            ("DELIVERED", "store"),
            ("ACCEPTED", "cache"),
            ("ACCEPTED", "lookup"),
            ("ACCEPTED", "lookup"),
            ("ACCEPTED", "shared-lookup"),
        ]
        .map(|(s, f)| (s.to_owned(), f.to_owned()))
    );
    assert!(
        matches!(results[5].result, Some(batch_result::Result::GetBalance(_))),
        "{:?}",
        results[5]
    );
    assert_eq!(results[5].answer_source, "");
    // The two ids the gateway was asked for went in one request; the balance beside.
    let asked: Vec<Vec<Value>> = app.gateway.envelopes()[before..].to_vec();
    let status_requests: Vec<usize> = asked
        .iter()
        .map(|ops| ops.iter().filter(|op| op["type"] == "status").count())
        .filter(|n| *n > 0)
        .collect();
    assert_eq!(status_requests, [2], "{asked:?}");
    // Asked again at once: fresh, and the final one from the store.
    let again = app
        .messaging()
        .batch(status_batch(&[5250, 5252, 5253]))
        .await
        .unwrap();
    let sources: Vec<String> = again
        .get_ref()
        .results
        .iter()
        .map(|r| status_item(r).1)
        .collect();
    assert_eq!(sources, ["store", "cache", "cache"]);
    assert_eq!(status_operations(&app), 3);
}

#[tokio::test]
async fn a_status_waited_for_says_where_it_came_from() {
    let app = spawn_app().await;
    // The default fake gateway answers DELIVERED: final at the first lookup.
    app.gateway.respond_with(default_reply);
    let mut request = tonic::Request::new(GetMessageStatusRequest {
        id: 6001,
        wait_for_final: true,
    });
    request.set_timeout(Duration::from_secs(5));
    let answer = app.messaging().get_message_status(request).await.unwrap();
    assert!(answer.get_ref().is_final);
    assert_eq!(source(&answer), "lookup");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_balance_calls_at_once_make_one_gateway_request() {
    let app = spawn_app().await;
    accepted_after(&app, Duration::from_millis(300));
    let answers = join_all((0..100).map(|_| {
        let mut client = app.account();
        async move { client.get_balance(GetBalanceRequest {}).await }
    }))
    .await;
    let mut sources = Vec::new();
    for answer in answers {
        let answer = answer.expect("every balance call is answered");
        assert_eq!(answer.get_ref().amount.as_ref().unwrap().units, 31);
        sources.push(source(&answer));
    }
    assert_eq!(lookups(&app, "balance"), 1, "{sources:?}");
    assert_eq!(sources.iter().filter(|s| *s == "lookup").count(), 1);
    // Then kept for MSGW_ACCOUNT_CACHE: answered again without the gateway.
    let again = app
        .account()
        .get_balance(GetBalanceRequest {})
        .await
        .unwrap();
    assert_eq!(source(&again), "cache");
    assert_eq!(lookups(&app, "balance"), 1);
    // The sender names are a lookup of their own.
    app.gateway.respond_with(default_reply);
    let senders = app
        .account()
        .list_senders(ListSendersRequest {})
        .await
        .unwrap();
    assert_eq!(source(&senders), "lookup");
}

#[tokio::test]
async fn calls_beyond_a_callers_query_rate_are_refused_with_retry_info() {
    const TOKEN: &str = "query-rate-token";
    let app = spawn(Options {
        callers: Some(Callers::new().caller(Entry::token("reader", TOKEN).queries(0.5, 3))),
        ..Options::default()
    })
    .await;
    let mut account = app.account();
    for _ in 0..2 {
        account
            .get_balance(as_caller(TOKEN, GetBalanceRequest {}))
            .await
            .expect("within the burst");
    }
    // Opening an event stream counts one.
    app.events()
        .stream_status_events(as_caller(TOKEN, StreamStatusEventsRequest::default()))
        .await
        .expect("the stream opens within the burst");
    let refused = account
        .get_balance(as_caller(TOKEN, GetBalanceRequest {}))
        .await
        .expect_err("beyond the burst");
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );
    let (reason, metadata) = error_info(&refused);
    assert_eq!(reason, "QUERY_RATE_LIMITED");
    assert_eq!(metadata["caller"], "reader");
    let delay = refused
        .get_details_retry_info()
        .and_then(|r| r.retry_delay)
        .expect("RetryInfo");
    assert!(
        delay > Duration::ZERO && delay <= Duration::from_secs(2),
        "{delay:?}"
    );
    let stream = app
        .events()
        .stream_status_events(as_caller(TOKEN, StreamStatusEventsRequest::default()))
        .await
        .expect_err("a stream beyond the burst is refused too");
    assert_eq!(stream.code(), tonic::Code::ResourceExhausted);
    // Sends are not queries: the send rate (none here) is the one that counts.
    let sent = app
        .messaging()
        .send_sms(as_caller(TOKEN, crate::helpers::sms(8801)))
        .await;
    assert!(sent.is_ok(), "{sent:?}");
    assert_eq!(
        app.metric_sum(
            "msgw_rate_refusals_total",
            &[r#"caller="reader""#, r#"rate="queries""#]
        )
        .await,
        2.0
    );
}
