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
    assert_eq!(balance.currency, "UAH");
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "no longer accepting connections"
    );
}
