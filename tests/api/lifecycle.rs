//! Shutdown: in-flight calls finish, new connections are refused.

use std::time::Duration;

use msgw::proto::*;

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
