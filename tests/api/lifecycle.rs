//! Start and shutdown: a start that cannot succeed fails fast in one line; at
//! shutdown in-flight calls finish and new connections are refused.

use std::time::Duration;

use msgw::transport::proto::*;

use crate::helpers::{Reply, default_reply, spawn_app};

#[tokio::test]
async fn shutdown_lets_an_in_flight_call_finish() {
    let app = spawn_app().await;
    app.gateway
        .respond_with(|b| Reply::After(Duration::from_millis(400), Box::new(default_reply(b))));
    let mut client = app.account();
    let call = tokio::spawn(async move { client.get_balance(GetBalanceRequest {}).await });
    // Wait until the call is really in flight: the gateway has seen it.
    for _ in 0..500 {
        if !app.gateway.requests().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        app.gateway.requests().len(),
        1,
        "the call reached the gateway"
    );
    let addr = app.addr;
    app.stop().await.expect("clean stop");
    let balance = call
        .await
        .unwrap()
        .expect("the in-flight call completes")
        .into_inner();
    assert_eq!(balance.amount.unwrap().currency_code, "UAH");
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "no longer accepting connections"
    );
}

#[tokio::test]
async fn during_the_shutdown_delay_health_says_not_serving_and_calls_still_work() {
    let app = crate::helpers::spawn(crate::helpers::Options {
        shutdown_delay: Duration::from_millis(800),
        ..crate::helpers::Options::default()
    })
    .await;
    let (mut account, addr) = (app.account(), app.addr);
    let readyz = format!("http://{}/readyz", app.admin_addr);
    let ready = reqwest::get(&readyz).await.unwrap();
    assert_eq!(ready.status(), 200);
    assert_eq!(ready.text().await.unwrap(), "SERVING\n");
    let channel = crate::helpers::connect(addr).await;
    let started = std::time::Instant::now();
    let stopping = tokio::spawn(app.stop());
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let not_serving = tonic_health::pb::health_check_response::ServingStatus::NotServing as i32;
    loop {
        let status = health
            .check(tonic_health::pb::HealthCheckRequest {
                service: String::new(),
            })
            .await
            .expect("health answers during the delay")
            .into_inner()
            .status;
        if status == not_serving {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "NOT_SERVING at once"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The admin listener's readiness says the same, for probes that cannot speak gRPC.
    assert_eq!(reqwest::get(&readyz).await.unwrap().status(), 503);
    account
        .get_balance(GetBalanceRequest {})
        .await
        .expect("calls are still served during the delay");
    stopping.await.unwrap().expect("clean stop");
    assert!(
        started.elapsed() >= Duration::from_millis(800),
        "drained only after the delay"
    );
}

/// Runs `msgw serve` with this store URL (which must fail); its one error line and how
/// long it took.
async fn failed_start(store_url: &str) -> (String, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let mut args = crate::helpers::serve_args(dir.path());
    let url = args.last_mut().unwrap();
    *url = store_url.to_owned();
    let started = std::time::Instant::now();
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_msgw"))
        .args(args)
        .env("MSGW_WEBHOOK_SECRET", crate::helpers::WEBHOOK_SECRET)
        .env("MSGW_ACCOUNT_TOKEN", crate::helpers::ACCOUNT_TOKEN)
        .env("MSGW_VERIFY_SECRET", crate::helpers::VERIFY_SECRET)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(30), output)
        .await
        .expect("msgw gives up")
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    // Log lines (JSON here) come before it; the failure itself is one line.
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.starts_with('{')).collect();
    assert_eq!(lines.len(), 1, "one line: {stderr}");
    assert!(lines[0].starts_with("msgw: "), "{stderr}");
    (lines[0].to_owned(), started.elapsed())
}

#[tokio::test]
async fn a_start_that_cannot_open_its_store_fails_fast_in_one_line_that_names_cause_and_fix() {
    let (line, _) = failed_start("sqlite:///nonexistent-msgw-dir/sub/msgw.db").await;
    assert!(
        line.contains("/nonexistent-msgw-dir/sub does not exist: create it"),
        "{line}"
    );

    let (closed, _held) = crate::helpers::refusing_addr();
    let (line, took) = failed_start(&format!("postgres://msgw@{closed}/test")).await;
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(line.contains(&format!("PostgreSQL at {closed}")), "{line}");
    assert!(line.to_lowercase().contains("connection refused"), "{line}");
    assert!(line.contains("is PostgreSQL running there"), "{line}");

    // A real server that refuses the role (start it with .ci/start-postgres).
    let (line, took) = failed_start("postgres://msgw_no_such_role@127.0.0.1:5432/test").await;
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert_eq!(
        line.matches("msgw_no_such_role\" does not exist").count(),
        1,
        "the cause once: {line}"
    );
    assert!(line.contains("check the user in MSGW_STORE_URL"), "{line}");
}
