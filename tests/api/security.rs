//! Who may call: bearer tokens from the callers file (reloaded while msgw runs),
//! permissions, send rates, and each caller seeing only its own messages' events.

use std::{path::PathBuf, time::Duration};

use msgw::transport::proto::*;
use serde_json::json;
use tokio_stream::StreamExt;
use tonic::{Code, Request, Streaming};
use tonic_types::StatusExt;

use crate::helpers::{
    Callers, Entry, Options, TestApp, as_caller, error_info, sha256_hex, sms, spawn,
};

const BILLING: &str = "billing-token-7f3a9c";
const ORDERS: &str = "orders-token-1b2c3d";
const READER: &str = "reader-token-9e8d7c";
const AUDIT: &str = "audit-token-5a6b7c";

/// The callers every test here starts with.
fn callers() -> Callers {
    Callers::new()
        .caller(Entry::token("billing", BILLING).rate(1.0, 2))
        .caller(Entry::token("orders", ORDERS))
        .caller(Entry::token("reader", READER).permissions(&["query"]))
        .caller(
            Entry::token("audit", AUDIT)
                .permissions(&["events"])
                .all_events(),
        )
}

fn callers_toml() -> String {
    callers().toml()
}

/// msgw with a callers file; the file's directory lives as long as the returned guard.
async fn app_with_callers(text: &str) -> (TestApp, tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("callers.toml");
    std::fs::write(&path, text).unwrap();
    let app = spawn(Options {
        callers_file: Some(path.clone()),
        ..Options::default()
    })
    .await;
    (app, dir, path)
}

fn webhook(id: u64) -> String {
    json!({"success": true, "id": id.to_string(), "msg_id": format!("m{id}"), "type": "sms",
           "status": "DELIVERED", "updated": "2026-01-02T03:04:05+00:00"})
    .to_string()
}

async fn next_id(stream: &mut Streaming<StreamStatusEventsResponse>) -> u64 {
    crate::events::next(stream).await.id
}

async fn stream_of(
    app: &TestApp,
    token: &str,
    request: StreamStatusEventsRequest,
) -> Streaming<StreamStatusEventsResponse> {
    app.events()
        .stream_status_events(as_caller(token, request))
        .await
        .expect("stream opens")
        .into_inner()
}

#[tokio::test]
async fn calls_without_a_known_token_are_unauthenticated_and_send_nothing() {
    let (app, _dir, _) = app_with_callers(&callers_toml()).await;
    let refused = app.messaging().send_sms(sms(1)).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");
    assert!(refused.message().contains("Bearer"), "{refused:?}");
    for bad in ["Bearer wrong-token", "Basic dXNlcjpwYXNz", "Bearer "] {
        let mut request = Request::new(sms(1));
        request
            .metadata_mut()
            .insert("authorization", bad.parse().unwrap());
        let refused = app.messaging().send_sms(request).await.unwrap_err();
        assert_eq!(refused.code(), Code::Unauthenticated, "{bad}: {refused:?}");
    }
    // The hash itself is not a token.
    let refused = app
        .messaging()
        .send_sms(as_caller(&sha256_hex(BILLING), sms(1)))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated);
    let refused = app
        .events()
        .stream_status_events(StreamStatusEventsRequest {
            from_oldest: true,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated);
    assert!(
        app.gateway.requests().is_empty(),
        "nothing reached the gateway"
    );

    let receipt = app
        .messaging()
        .send_sms(as_caller(BILLING, sms(1)))
        .await
        .expect("a known token sends")
        .into_inner();
    assert_eq!(receipt.receipt.unwrap().id, 1);
    assert_eq!(app.gateway.requests().len(), 1);
    assert_eq!(
        app.metric(
            r#"msgw_rpc_requests_total{caller="unknown",code="UNAUTHENTICATED",method="SendSms"}"#
        )
        .await,
        Some(5.0)
    );
    assert_eq!(
        app.metric(r#"msgw_rpc_requests_total{caller="billing",code="OK",method="SendSms"}"#)
            .await,
        Some(1.0)
    );
}

#[tokio::test]
async fn health_and_reflection_stay_open_without_a_token() {
    let (app, _dir, _) = app_with_callers(&callers_toml()).await;
    let channel = crate::helpers::connect(app.addr).await;
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    let serving = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "msgw.v1.MessagingService".into(),
        })
        .await
        .expect("health needs no token")
        .into_inner();
    assert_eq!(serving.status, 1);
    let mut reflection =
        tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient::new(channel);
    let mut answers = reflection
        .server_reflection_info(tokio_stream::once(
            tonic_reflection::pb::v1::ServerReflectionRequest {
                host: String::new(),
                message_request: Some(
                    tonic_reflection::pb::v1::server_reflection_request::MessageRequest::ListServices(
                        String::new(),
                    ),
                ),
            },
        ))
        .await
        .expect("reflection needs no token")
        .into_inner();
    let listed = format!("{:?}", answers.next().await.unwrap().unwrap());
    assert!(listed.contains("msgw.v1.MessagingService"), "{listed}");
}

#[tokio::test]
async fn a_token_removed_from_the_callers_file_stops_working_without_a_restart() {
    let (app, _dir, path) = app_with_callers(&callers_toml()).await;
    app.account()
        .get_balance(as_caller(ORDERS, GetBalanceRequest {}))
        .await
        .expect("orders may query");

    // A broken file is refused and the callers loaded before stay.
    std::fs::write(&path, "[[caller]]\nname = \"orders\"\ntoken = \"plain\"\n").unwrap();
    wait_for_metric(
        &app,
        r#"msgw_config_reloads_total{file="callers",outcome="failed"}"#,
    )
    .await;
    app.account()
        .get_balance(as_caller(ORDERS, GetBalanceRequest {}))
        .await
        .expect("a broken file changes nothing");

    // So is an empty one (a truncated write): zero callers would lock everyone out.
    std::fs::write(&path, "").unwrap();
    let failed = r#"msgw_config_reloads_total{file="callers",outcome="failed"}"#;
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    while app.metric(failed).await < Some(2.0) {
        assert!(
            tokio::time::Instant::now() < until,
            "the empty file was not refused"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    app.account()
        .get_balance(as_caller(ORDERS, GetBalanceRequest {}))
        .await
        .expect("an empty file changes nothing");

    let without_orders = Callers::new()
        .caller(Entry::token("billing", BILLING).rate(1.0, 2))
        .caller(Entry::token("reader", READER).permissions(&["query"]))
        .caller(
            Entry::token("audit", AUDIT)
                .permissions(&["events"])
                .all_events(),
        )
        .toml();
    std::fs::write(&path, without_orders).unwrap();
    wait_for_metric(
        &app,
        r#"msgw_config_reloads_total{file="callers",outcome="loaded"}"#,
    )
    .await;
    let refused = app
        .account()
        .get_balance(as_caller(ORDERS, GetBalanceRequest {}))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");
    app.account()
        .get_balance(as_caller(READER, GetBalanceRequest {}))
        .await
        .expect("the other callers stay");
}

/// Waits (bounded) until a counter shows up on /metrics.
async fn wait_for_metric(app: &TestApp, series: &str) {
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    while app.metric(series).await.is_none() {
        assert!(
            tokio::time::Instant::now() < until,
            "no {series} within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_caller_may_do_only_what_its_permissions_list() {
    let (app, _dir, _) = app_with_callers(&callers_toml()).await;
    let refused = app
        .messaging()
        .send_sms(as_caller(READER, sms(1)))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert!(refused.message().contains("\"send\""), "{refused:?}");
    let batch = BatchRequest {
        items: vec![
            BatchItem {
                operation: Some(batch_item::Operation::GetBalance(GetBalanceRequest {})),
            },
            BatchItem {
                operation: Some(batch_item::Operation::SendSms(sms(2))),
            },
        ],
    };
    let refused = app
        .messaging()
        .batch(as_caller(READER, batch))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied);
    assert!(
        refused.message().contains("items[1] (SendSms)"),
        "{refused:?}"
    );
    let refused = app
        .templates()
        .list_sms_templates(as_caller(READER, ListSmsTemplatesRequest {}))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied);
    let refused = app
        .events()
        .stream_status_events(as_caller(READER, StreamStatusEventsRequest::default()))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied);
    let refused = app
        .account()
        .get_balance(as_caller(AUDIT, GetBalanceRequest {}))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied);
    assert!(
        app.gateway.requests().is_empty(),
        "nothing reached the gateway"
    );

    app.account()
        .get_balance(as_caller(READER, GetBalanceRequest {}))
        .await
        .expect("query is permitted");
}

#[tokio::test]
async fn sends_over_a_callers_rate_are_refused_with_retry_info_and_not_sent() {
    let (app, _dir, _) = app_with_callers(&callers_toml()).await;
    for id in [1, 2] {
        app.messaging()
            .send_sms(as_caller(BILLING, sms(id)))
            .await
            .expect("within the burst");
    }
    let refused = app
        .messaging()
        .send_sms(as_caller(BILLING, sms(3)))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    let (reason, metadata) = error_info(&refused);
    assert_eq!(reason, "RATE_LIMITED");
    assert_eq!(metadata["caller"], "billing");
    let delay = refused
        .get_details_retry_info()
        .and_then(|r| r.retry_delay)
        .expect("RetryInfo with a delay");
    assert!(
        delay > Duration::ZERO && delay <= Duration::from_secs(1),
        "{delay:?}"
    );
    // More sends in one call than the burst never fit: no RetryInfo, the text says why.
    let batch = BatchRequest {
        items: (10..13)
            .map(|id| BatchItem {
                operation: Some(batch_item::Operation::SendSms(sms(id))),
            })
            .collect(),
    };
    let refused = app
        .messaging()
        .batch(as_caller(BILLING, batch))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert!(refused.get_details_retry_info().is_none(), "{refused:?}");
    assert!(refused.message().contains("split the call"), "{refused:?}");
    // Another caller's sends are not limited by billing's rate; queries never are.
    app.messaging()
        .send_sms(as_caller(ORDERS, sms(4)))
        .await
        .expect("orders has no rate");
    app.account()
        .get_balance(as_caller(BILLING, GetBalanceRequest {}))
        .await
        .expect("queries are not sends");
    let sent: Vec<u64> = app
        .gateway
        .envelopes()
        .iter()
        .flatten()
        .filter_map(|item| item["id"].as_u64())
        .collect();
    assert_eq!(
        sent,
        vec![1, 2, 4],
        "refused sends never reached the gateway"
    );
}

#[tokio::test]
async fn a_caller_sees_only_its_own_messages_events_and_statuses_even_from_the_oldest() {
    let (app, _dir, _) = app_with_callers(&callers_toml()).await;
    for (token, id) in [(BILLING, 1), (ORDERS, 2)] {
        app.messaging()
            .send_sms(as_caller(token, sms(id)))
            .await
            .unwrap();
    }
    let mut audit_live = stream_of(&app, AUDIT, StreamStatusEventsRequest::default()).await;
    let mut orders_live = stream_of(&app, ORDERS, StreamStatusEventsRequest::default()).await;
    for id in [1, 2] {
        assert_eq!(app.post_webhook(&app.hook_path(id), webhook(id)).await, 200);
    }
    // "all": both, in order; "own": only its message, the other never shows up before it.
    assert_eq!(next_id(&mut audit_live).await, 1);
    assert_eq!(next_id(&mut audit_live).await, 2);
    assert_eq!(next_id(&mut orders_live).await, 2);

    let oldest = StreamStatusEventsRequest {
        from_oldest: true,
        ..Default::default()
    };
    let mut orders_replay = stream_of(&app, ORDERS, oldest.clone()).await;
    assert_eq!(next_id(&mut orders_replay).await, 2);
    // Even asking for billing's id by name shows nothing of it: the next event orders
    // sees is its own next message's.
    let mut orders_asks_for_1 = stream_of(
        &app,
        ORDERS,
        StreamStatusEventsRequest {
            from_oldest: true,
            ids: vec![1, 3],
            ..Default::default()
        },
    )
    .await;
    app.messaging()
        .send_sms(as_caller(ORDERS, sms(3)))
        .await
        .unwrap();
    assert_eq!(app.post_webhook(&app.hook_path(3), webhook(3)).await, 200);
    assert_eq!(next_id(&mut orders_asks_for_1).await, 3);
    assert_eq!(next_id(&mut orders_replay).await, 3);
    assert_eq!(next_id(&mut orders_live).await, 3);
    // A status carries the recipient's replies too: only the sender may ask for it.
    let status = |token: &'static str, id: u64, wait_for_final: bool| {
        let mut messaging = app.messaging();
        async move {
            messaging
                .get_message_status(as_caller(
                    token,
                    GetMessageStatusRequest { id, wait_for_final },
                ))
                .await
        }
    };
    status(ORDERS, 2, false).await.expect("its own message");
    status(ORDERS, 2, true)
        .await
        .expect("its own message, waited for");
    for (id, wait) in [(1, false), (1, true), (404, false)] {
        let refused = status(ORDERS, id, wait).await.unwrap_err();
        assert_eq!(refused.code(), Code::PermissionDenied, "{id}: {refused:?}");
        assert!(
            refused.message().contains("messages it sent"),
            "{refused:?}"
        );
    }
    let batch = BatchRequest {
        items: [2, 1]
            .map(|id| BatchItem {
                operation: Some(batch_item::Operation::GetMessageStatus(
                    GetMessageStatusRequest {
                        id,
                        ..Default::default()
                    },
                )),
            })
            .to_vec(),
    };
    let refused = app
        .messaging()
        .batch(as_caller(ORDERS, batch))
        .await
        .unwrap_err();
    assert!(refused.message().starts_with("items[1]: "), "{refused:?}");

    let mut billing_replay = stream_of(&app, BILLING, oldest).await;
    assert_eq!(next_id(&mut billing_replay).await, 1);
    // orders' 2 and 3 come between: billing's next is its own 5.
    app.messaging()
        .send_sms(as_caller(BILLING, sms(5)))
        .await
        .unwrap();
    assert_eq!(app.post_webhook(&app.hook_path(5), webhook(5)).await, 200);
    assert_eq!(next_id(&mut billing_replay).await, 5);
}

#[tokio::test]
async fn an_id_conflict_never_reveals_another_callers_msg_id() {
    let (app, _dir, _) = app_with_callers(&callers_toml()).await;
    let first = app
        .messaging()
        .send_sms(as_caller(ORDERS, sms(7)))
        .await
        .unwrap()
        .into_inner()
        .receipt
        .unwrap();
    // The same request from another caller: a conflict, without the msg_id.
    let refused = app
        .messaging()
        .send_sms(as_caller(BILLING, sms(7)))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::AlreadyExists, "{refused:?}");
    let (reason, metadata) = error_info(&refused);
    assert_eq!(reason, "ID_CONFLICT");
    assert!(!metadata.contains_key("msg_id"), "{metadata:?}");
    assert!(!refused.message().contains(&first.msg_id), "{refused:?}");
    // Its own retry is answered from the claim; its own different request names it.
    let replay = app
        .messaging()
        .send_sms(as_caller(ORDERS, sms(7)))
        .await
        .unwrap();
    assert_eq!(replay.metadata().get("msgw-replayed").unwrap(), "true");
    assert_eq!(replay.into_inner().receipt.unwrap().msg_id, first.msg_id);
    let changed = SendSmsRequest {
        message: "Another text".into(),
        ..sms(7)
    };
    let refused = app
        .messaging()
        .send_sms(as_caller(ORDERS, changed))
        .await
        .unwrap_err();
    let (_, metadata) = error_info(&refused);
    assert_eq!(metadata.get("msg_id"), Some(&first.msg_id));
    assert_eq!(
        app.gateway.requests().len(),
        1,
        "one send reached the gateway"
    );
}

#[tokio::test]
async fn a_bad_callers_file_refuses_to_start_and_says_where() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("callers.toml");
    std::fs::write(
        &path,
        "[[caller]]\nname = \"x\"\ntoken_sha256 = \"not-hex\"\n",
    )
    .unwrap();
    let gateway = crate::helpers::FakeGateway::start().await;
    let (config, _store) = crate::helpers::config(
        Options {
            callers_file: Some(path),
            ..Options::default()
        },
        &gateway,
    );
    let error = msgw::process::app::Application::build(config)
        .await
        .err()
        .expect("a bad callers file refuses to start")
        .to_string();
    assert!(
        error.contains("callers.toml") && error.contains("caller[0].token_sha256"),
        "{error}"
    );
}

#[tokio::test]
async fn msgw_refuses_a_real_gateway_without_caller_authentication_and_says_how_to_fix_it() {
    let store = tempfile::tempdir().unwrap();
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_msgw"))
        .args(crate::helpers::serve_args(store.path()))
        .args([
            "--upstream-url",
            "https://gateway.example",
            "--api-key",
            "k",
        ])
        .env_remove("MSGW_ALLOW_UNAUTHENTICATED")
        .env_remove("MSGW_CALLERS_FILE")
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(30), output)
        .await
        .expect("msgw exits at once")
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    for hint in [
        "MSGW_CALLERS_FILE",
        "MSGW_GRPC_TLS_CLIENT_CA_FILE",
        "MSGW_ALLOW_UNAUTHENTICATED=true",
    ] {
        assert!(stderr.contains(hint), "{stderr}");
    }
}

/// The first line `msgw serve` logs on the sandbox, with `extra` flags.
async fn first_log_line(extra: &[&str]) -> String {
    use tokio::io::AsyncBufReadExt;
    let store = tempfile::tempdir().unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_msgw"))
        .args(crate::helpers::serve_args(store.path()))
        .args(extra)
        .env_remove("MSGW_UPSTREAM_URL")
        .env_remove("MSGW_CALLERS_FILE")
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("msgw logs within 30 s")
        .unwrap()
        .expect("a log line");
    child.kill().await.unwrap();
    line
}

#[tokio::test]
async fn the_sandbox_says_in_its_first_log_line_whether_the_grpc_port_is_open() {
    let open = first_log_line(&[]).await;
    assert!(
        open.contains("SANDBOX") && open.contains("The gRPC port is OPEN"),
        "{open}"
    );
    let dir = tempfile::tempdir().unwrap();
    let callers = dir.path().join("callers.toml");
    std::fs::write(&callers, callers_toml()).unwrap();
    let closed = first_log_line(&["--callers-file", callers.to_str().unwrap()]).await;
    assert!(
        closed.contains("SANDBOX") && closed.contains("Callers authenticate"),
        "{closed}"
    );
}

/// The code and message of a unary call's answer (its error, or OK).
fn outcome<T>(answer: Result<tonic::Response<T>, tonic::Status>) -> (Code, String) {
    match answer {
        Ok(_) => (Code::Ok, String::new()),
        Err(status) => (status.code(), status.message().to_owned()),
    }
}

#[tokio::test]
async fn a_caller_without_the_permission_learns_nothing_of_its_request_on_every_service() {
    const OPERATOR: &str = "operator-token-4d5e6f";
    let everything = [
        "send",
        "query",
        "templates",
        "events",
        "admin",
        "suppressions",
    ];
    let callers = callers().caller(Entry::token("operator", OPERATOR).permissions(&everything));
    let (app, _dir, _) = app_with_callers(&callers.toml()).await;
    // One invalid request of every service (and of MessagingService's own RPCs): each
    // is refused for its content when a permitted caller sends it, and for the
    // permission alone when a caller without it does, whatever the service.
    let (messaging, account, templates, events) = (
        app.messaging(),
        app.account(),
        app.templates(),
        app.events(),
    );
    let (verification, suppressions, guard) =
        (app.verification(), app.suppressions(), app.fraud_guard());
    let bad_item = || BatchRequest {
        items: vec![BatchItem {
            operation: Some(batch_item::Operation::SendSms(SendSmsRequest::default())),
        }],
    };
    let bad_filter = || StreamStatusEventsRequest {
        channels: vec![999],
        ..Default::default()
    };
    let calls = |token: &'static str| {
        let (mut messaging, mut account, mut templates, mut events) = (
            messaging.clone(),
            account.clone(),
            templates.clone(),
            events.clone(),
        );
        let (mut verification, mut suppressions, mut guard) =
            (verification.clone(), suppressions.clone(), guard.clone());
        async move {
            vec![
                (
                    "SendSms",
                    outcome(
                        messaging
                            .send_sms(as_caller(token, SendSmsRequest::default()))
                            .await,
                    ),
                ),
                (
                    "Batch",
                    outcome(messaging.batch(as_caller(token, bad_item())).await),
                ),
                (
                    "CancelMessage",
                    outcome(
                        messaging
                            .cancel_message(as_caller(token, CancelMessageRequest::default()))
                            .await,
                    ),
                ),
                (
                    "EstimateSms",
                    outcome(
                        messaging
                            .estimate_sms(as_caller(token, EstimateSmsRequest::default()))
                            .await,
                    ),
                ),
                (
                    "CreateSmsTemplate",
                    outcome(
                        templates
                            .create_sms_template(as_caller(
                                token,
                                CreateSmsTemplateRequest::default(),
                            ))
                            .await,
                    ),
                ),
                (
                    "StreamStatusEvents",
                    outcome(
                        events
                            .stream_status_events(as_caller(token, bad_filter()))
                            .await,
                    ),
                ),
                (
                    "StartVerification",
                    outcome(
                        verification
                            .start_verification(as_caller(
                                token,
                                StartVerificationRequest::default(),
                            ))
                            .await,
                    ),
                ),
                (
                    "AddSuppression",
                    outcome(
                        suppressions
                            .add_suppression(as_caller(
                                token,
                                AddSuppressionRequest {
                                    phone: "not a number".into(),
                                    reason: String::new(),
                                },
                            ))
                            .await,
                    ),
                ),
                (
                    "ReleaseRange",
                    outcome(
                        guard
                            .release_range(as_caller(
                                token,
                                ReleaseRangeRequest { range: "x".into() },
                            ))
                            .await,
                    ),
                ),
                (
                    "LookupHlr",
                    outcome(
                        account
                            .lookup_hlr(as_caller(
                                // Queries: the caller without them is the events-only one.
                                if token == READER { AUDIT } else { token },
                                LookupHlrRequest::default(),
                            ))
                            .await,
                    ),
                ),
                (
                    "LookupNumber",
                    outcome(
                        messaging
                            .lookup_number(as_caller(
                                if token == READER { AUDIT } else { token },
                                LookupNumberRequest { phone: "x".into() },
                            ))
                            .await,
                    ),
                ),
            ]
        }
    };
    for (rpc, (code, message)) in calls(OPERATOR).await {
        assert_eq!(
            code,
            Code::InvalidArgument,
            "{rpc} from a permitted caller: {message}"
        );
    }
    for (rpc, (code, message)) in calls(READER).await {
        assert_eq!(
            code,
            Code::PermissionDenied,
            "{rpc} without the permission: {message}"
        );
        assert!(message.contains("permission"), "{rpc}: {message}");
        assert!(!message.contains("invalid"), "{rpc}: {message}");
    }
    assert!(
        app.gateway.requests().is_empty(),
        "nothing reached the gateway"
    );
}
