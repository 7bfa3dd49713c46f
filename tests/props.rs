//! Property tests over the three parsers that face the outside: webhook bodies,
//! gateway answers and gRPC requests. Whatever comes in, nothing panics, nothing is
//! stored that cannot be read back, and every value stays within what its proto type
//! (and JSON clients such as grpcurl) can represent.

use std::time::Duration;

use chrono::Utc;
use msgw::{
    adapters::store::SqlStore,
    adapters::upstream::{canonical, parse_output, parse_webhook},
    core::domain::{
        ClientId, EventSource, MAX_DURATION_SECS, NewEvent, Operation, Text, Violations,
        representable,
    },
    core::ports::store::Store,
    transport::grpc::convert::{FromOutput, IntoOperation},
    transport::proto::{self, BatchItem, SendSmsRequest, SendVoiceRequest, batch_item},
};
use proptest::prelude::*;
use serde_json::{Value, json};

/// Any JSON value, nested a few levels, with the awkward cases weighted in: huge and
/// negative numbers, odd strings, dates at and beyond the representable range.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("JSON numbers are finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        Just(json!(1e300)),
        ".{0,40}".prop_map(Value::String),
        prop_oneof![
            Just("9999-12-31T23:59:59-23:59"),
            Just("0000-01-01T00:00:00+00:00"),
            Just("2026-01-02T03:04:05+02:00"),
            Just("+10000-01-01T00:00:00Z"),
            Just("DELIVERED"),
            Just("123456789"),
        ]
        .prop_map(|s| Value::String(s.to_owned())),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(".{0,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A webhook-shaped object: the documented keys with values of any type.
fn webhook_body() -> impl Strategy<Value = Value> {
    let keys = [
        "success",
        "id",
        "msg_id",
        "type",
        "status",
        "error",
        "updated",
        "reply",
        "duration",
        "request_id",
        "replies",
    ];
    // Mostly with a readable `success` and `status`, so most bodies get as far as the store.
    let base = (any::<bool>(), ".{1,12}").prop_map(
        |(success, status)| json!({"success": success, "status": status, "msg_id": "m1"}),
    );
    (
        base,
        prop::collection::vec((0..keys.len(), any_json()), 0..4),
    )
        .prop_map(move |(base, fields)| {
            let mut body = base.as_object().cloned().unwrap_or_default();
            for (k, v) in fields {
                body.insert(keys[k].to_owned(), v);
            }
            Value::Object(body)
        })
}

/// Checks a Timestamp fits `google.protobuf.Timestamp` (years 1 to 9999).
fn timestamp_in_range(t: &prost_types::Timestamp) -> bool {
    (-62_135_596_800..=253_402_300_799).contains(&t.seconds)
        && (0..1_000_000_000).contains(&t.nanos)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn webhook_bodies_never_panic_and_what_is_taken_is_stored_and_read_back(body in webhook_body()) {
        let bytes = serde_json::to_vec(&body).unwrap();
        let Ok(report) = parse_webhook(&bytes) else { return Ok(()) };
        prop_assert!(report.status.is_some());
        if let Some(t) = &report.updated {
            prop_assert!(representable(t));
        }
        if let Some(d) = report.duration_secs {
            prop_assert!((0.0..=MAX_DURATION_SECS).contains(&d));
        }
        for reply in &report.replies {
            if let Some(t) = &reply.datetime {
                prop_assert!(representable(t));
            }
        }
        let event = NewEvent { report, received_at: Utc::now(), source: EventSource::Webhook };
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let read = runtime.block_on(async {
            let store = SqlStore::sqlite("sqlite::memory:", Duration::from_secs(60)).await.unwrap();
            let stored = store.append_batch(std::slice::from_ref(&event)).await.unwrap();
            let read = store.events_after(msgw::core::domain::Cursor::START, 10).await.unwrap();
            store.close().await;
            (stored, read)
        });
        let (stored, read) = read;
        prop_assert!(stored[0].is_some());
        prop_assert_eq!(read.len(), 1);
        let read = read[0].status().expect("a status");
        // Whether a reply's time was unreadable matters only as the report arrives
        // (its opt-in keyword is not applied then); the store does not keep it.
        let mut taken = event.report.clone();
        for reply in &mut taken.replies {
            reply.time_unreadable = false;
        }
        prop_assert_eq!(&read.event.report, &taken, "stored as taken");
    }

    #[test]
    fn gateway_status_answers_never_panic_and_stay_representable(payload in any_json(), id in 1u64..1000) {
        let op = Operation::GetMessageStatus(ClientId::new(id).unwrap());
        if let Ok(output) = parse_output(&op, payload)
            && let Ok(response) = proto::GetMessageStatusResponse::from_output(output)
            && let Some(t) = &response.updated
        {
            prop_assert!(timestamp_in_range(t), "{t:?}");
        }
    }

    #[test]
    fn gateway_answers_to_every_operation_never_panic(payload in any_json()) {
        let ops = [
            Operation::GetBalance,
            Operation::ListSenders,
            Operation::ListSmsTemplates,
            Operation::ListViberTemplates,
        ];
        for op in &ops {
            let _ = parse_output(op, payload.clone());
        }
    }

    #[test]
    fn requests_never_panic_and_what_passes_is_within_every_bound(
        id in any::<u64>(),
        phone in prop_oneof![".{0,20}", "\\+?[0-9]{5,17}"],
        message in prop_oneof![".{0,50}", Just("x".repeat(5_001)), Just("я".repeat(5_000))],
        signature in prop_oneof![".{0,10}", Just("s".repeat(65))],
    ) {
        let sms = SendSmsRequest {
            id,
            phone: phone.clone(),
            message: message.clone(),
            signature: signature.clone(),
            ..Default::default()
        };
        let voice = SendVoiceRequest {
            id,
            phone,
            message,
            ..Default::default()
        };
        let batch = vec![
            BatchItem { operation: Some(batch_item::Operation::SendSms(sms.clone())) },
            BatchItem { operation: Some(batch_item::Operation::SendVoice(voice.clone())) },
        ];
        let mut ops = Vec::new();
        let mut v = Violations::new();
        ops.extend(sms.into_operation(&mut v.scope("")));
        let mut v = Violations::new();
        ops.extend(voice.into_operation(&mut v.scope("")));
        for item in batch {
            let mut v = Violations::new();
            if let Some(batch_item::Operation::SendSms(r)) = item.operation {
                ops.extend(r.into_operation(&mut v.scope("items[0].send_sms")));
            }
        }
        for op in ops {
            let id = op.client_id().map(ClientId::get);
            prop_assert!(id.is_some_and(|id| id <= ClientId::MAX));
            let wire = canonical(&op);
            prop_assert!(!wire.is_empty());
            let json: Value = serde_json::from_slice(&wire).unwrap();
            let text = json["text"].as_str().or(json["message"].as_str()).unwrap_or_default();
            prop_assert!(text.chars().count() <= Text::MAX_MESSAGE);
        }
    }
}
