//! Operations: Prometheus metrics, and the real binary's SIGTERM handling.

use std::{process::Command, time::Duration};

use msgw::transport::proto::*;
use tokio_stream::StreamExt;
use tonic::Code;

use crate::helpers::{FakeGateway, Options, Reply, connect, default_reply, spawn};

async fn metrics(app: &crate::helpers::TestApp) -> String {
    reqwest::get(format!("http://{}/metrics", app.admin_addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The value of the first sample whose line starts with `series`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test]
async fn metrics_expose_rpcs_upstream_billing_webhooks_events_streams_and_balance() {
    let app = spawn(Options {
        sandbox_step: Some(Duration::from_millis(5)),
        balance_refresh: Duration::from_millis(50),
        ..Options::default()
    })
    .await;
    let mut stream = app
        .events()
        .stream_status_events(StreamStatusEventsRequest {
            ids: vec![1],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    app.messaging()
        .send_sms(SendSmsRequest {
            id: 1,
            phone: "380971234567".into(),
            message: "x".repeat(161),
            signature: "msgw".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    app.account()
        .get_balance(GetBalanceRequest {})
        .await
        .unwrap();
    let _ = app
        .messaging()
        .send_sms(SendSmsRequest::default())
        .await
        .unwrap_err();
    // The delivery webhook arrives, and a forged one is refused.
    stream.next().await.unwrap().unwrap();
    assert_eq!(
        app.post_webhook("/v1/webhooks/status/forged", r#"{"success":true,"id":"1"}"#)
            .await,
        401
    );

    let text = metrics(&app).await;
    for series in [
        r#"msgw_rpc_requests_total{caller="anonymous",code="OK",method="SendSms"} "#,
        r#"msgw_rpc_requests_total{caller="anonymous",code="INVALID_ARGUMENT",method="SendSms"} "#,
        r#"msgw_rpc_requests_total{caller="anonymous",code="OK",method="GetBalance"} "#,
        r#"msgw_rpc_duration_seconds_bucket{caller="anonymous",code="OK",method="SendSms",le="+Inf"} "#,
        r#"msgw_rpc_duration_seconds_count{caller="anonymous",code="INVALID_ARGUMENT",method="SendSms"} "#,
        r#"msgw_operations_total{code="OK",operation="SendSms",reason=""} "#,
        r#"msgw_upstream_requests_total{operation="sms",outcome="ok"} "#,
        r#"msgw_upstream_duration_seconds_count{operation="balance",outcome="ok"} "#,
        r#"msgw_billed_parts_total{channel="sms"} "#,
        r#"msgw_webhooks_total{endpoint="status",result="stored"} "#,
        r#"msgw_webhooks_total{endpoint="status",result="unauthorized"} "#,
        r#"msgw_events_total{result="stored",source="webhook"} "#,
        "msgw_event_streams_open ",
        r#"msgw_balance{currency="UAH"} "#,
        "process_resident_memory_bytes ",
        "process_start_time_seconds ",
    ] {
        let value =
            sample(&text, series).unwrap_or_else(|| panic!("{series} missing from:\n{text}"));
        assert!(value > 0.0, "{series} is {value}");
    }
    assert!(
        sample(&text, "process_cpu_seconds_total ").is_some(),
        "process metrics"
    );
    let build = text
        .lines()
        .find(|l| l.starts_with("msgw_build_info{"))
        .unwrap_or_else(|| panic!("msgw_build_info missing from:\n{text}"));
    assert!(
        build.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION")))
            && build.contains("revision=\"")
            && build.ends_with(" 1"),
        "{build}"
    );
    // 161 GSM-7 characters are two SMS parts.
    assert!(sample(&text, r#"msgw_billed_parts_total{channel="sms"} "#).unwrap() >= 2.0);
}

#[tokio::test]
async fn metrics_are_served_on_the_admin_listener_only() {
    let app = spawn(Options::default()).await;
    let admin = reqwest::get(format!("http://{}/metrics", app.admin_addr))
        .await
        .unwrap();
    assert_eq!(admin.status(), 200);
    assert!(admin.text().await.unwrap().contains("msgw_build_info"));
    let live = reqwest::get(format!("http://{}/livez", app.admin_addr))
        .await
        .unwrap();
    assert_eq!(live.status(), 200);
    // The webhook listener faces the internet: no balance or traffic figures there.
    let public = reqwest::get(format!("http://{}/metrics", app.http_addr))
        .await
        .unwrap();
    assert_eq!(public.status(), 404);
    assert!(!public.text().await.unwrap().contains("msgw_"));
    for path in ["/readyz", "/livez"] {
        let public = reqwest::get(format!("http://{}{path}", app.http_addr))
            .await
            .unwrap();
        assert_eq!(public.status(), 404, "{path}");
    }
}

#[tokio::test]
async fn a_batch_counts_each_items_outcome() {
    let gateway = FakeGateway::start().await;
    let app = spawn(Options {
        upstream_url: Some(gateway.url.clone()),
        ..Options::default()
    })
    .await;
    // The gateway rejects the second of four sends.
    gateway.respond_with(|body| {
        let Reply::Json(mut answer) = default_reply(body) else {
            unreachable!("JSON")
        };
        answer["data"][1] = serde_json::json!({"success": false, "error": "Error in Sender-name", "data": {"id": 2}});
        Reply::Json(answer)
    });
    let sms = |id| BatchItem {
        operation: Some(batch_item::Operation::SendSms(SendSmsRequest {
            id,
            phone: "380971234567".into(),
            message: "Hi".into(),
            signature: "msgw".into(),
            ..Default::default()
        })),
    };
    app.messaging()
        .batch(BatchRequest {
            items: (1..=4).map(sms).collect(),
        })
        .await
        .unwrap();
    let text = metrics(&app).await;
    assert_eq!(
        sample(
            &text,
            r#"msgw_operations_total{code="OK",operation="SendSms",reason=""} "#
        ),
        Some(3.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"msgw_operations_total{code="FAILED_PRECONDITION",operation="SendSms",reason="UPSTREAM_REJECTED"} "#
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"msgw_rpc_requests_total{caller="anonymous",code="OK",method="Batch"} "#
        ),
        Some(1.0),
        "the Batch call itself succeeded"
    );
}

#[tokio::test]
async fn msgw_check_exits_zero_only_when_msgw_serves() {
    let app = spawn(Options::default()).await;
    let check = |addr: String| {
        Command::new(env!("CARGO_BIN_EXE_msgw"))
            .args(["check", "--addr", &addr, "--timeout", "2s"])
            .output()
            .expect("msgw check runs")
    };
    let addr = app.addr.to_string();
    let serving = tokio::task::spawn_blocking(move || check(addr))
        .await
        .unwrap();
    assert!(serving.status.success(), "{serving:?}");
    assert!(String::from_utf8_lossy(&serving.stdout).contains("SERVING"));
    // Nothing listens there.
    let (closed, _held) = crate::helpers::refusing_addr();
    let addr = closed.to_string();
    let down = tokio::task::spawn_blocking(move || check(addr))
        .await
        .unwrap();
    assert!(!down.status.success());
    assert!(
        String::from_utf8_lossy(&down.stderr).contains("cannot connect to msgw"),
        "{down:?}"
    );
}

/// A running `msgw serve` process and its gRPC address, read from its JSON log.
fn start_binary(
    gateway_url: &str,
    store: &std::path::Path,
) -> (std::process::Child, std::net::SocketAddr) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_msgw"));
    command
        .args(crate::helpers::serve_args(store))
        .args([
            "--upstream-url",
            gateway_url,
            "--api-key",
            crate::helpers::API_KEY,
            "--allow-unauthenticated",
        ])
        .args(["--shutdown-grace", "10s", "--balance-refresh", "0"]);
    crate::helpers::serving_binary(command)
}

#[tokio::test]
async fn sigterm_drains_an_in_flight_call_and_ends_streams_cleanly() {
    let gateway = FakeGateway::start().await;
    gateway.respond_with(|b| Reply::After(Duration::from_millis(700), Box::new(default_reply(b))));
    let store = tempfile::tempdir().unwrap();
    let (mut child, addr) = start_binary(&gateway.url, store.path());
    let channel = connect(addr).await;

    let mut stream =
        msgw::transport::proto::event_service_client::EventServiceClient::new(channel.clone())
            .stream_status_events(StreamStatusEventsRequest::default())
            .await
            .unwrap()
            .into_inner();
    let mut account =
        msgw::transport::proto::account_service_client::AccountServiceClient::new(channel);
    let call = tokio::spawn(async move { account.get_balance(GetBalanceRequest {}).await });
    gateway.first_request().await;

    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());

    let end = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("stream ends");
    match end {
        Some(Err(status)) => assert_eq!(status.code(), Code::Unavailable),
        other => panic!("expected UNAVAILABLE, got {other:?}"),
    }
    let balance = call
        .await
        .unwrap()
        .expect("the in-flight call completes")
        .into_inner();
    assert_eq!(balance.amount.unwrap().currency_code, "UAH");
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "msgw exits cleanly: {status}");
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "no longer listening"
    );
}
