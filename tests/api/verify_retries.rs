//! Fix 45, finding 1: a verification's send id stays tied to its request. A resend the
//! gateway refused, retried with its id and another number (or another request), is
//! ALREADY_EXISTS and sends nothing; a retry of the same request that really sends its
//! code is checked and counted by the guard as a code. On SQLite and on two PostgreSQL
//! replicas.

use std::sync::{Arc, Mutex};

use msgw::core::verify::guard::Settings;
use msgw::transport::proto::CheckVerificationRequest;
use serde_json::{Value, json};
use tonic::Code;

use crate::fraud_guard::{request, start};
use crate::guard_codes::{Apps, On};
use crate::helpers::{Reply, error_info};

/// The SMS a gateway accepted: (number, text).
type Accepted = Arc<Mutex<Vec<(String, String)>>>;

/// Accepts every SMS but those signed `bad` (`Error in Sender-name`), and the first one
/// signed `flaky` (`flaky_refused` says whether any gateway of the case refused it);
/// records what it accepted.
fn gateway(
    accepted: Accepted,
    flaky_refused: Arc<Mutex<bool>>,
) -> impl Fn(&Value) -> Reply + Send + Sync + 'static {
    move |body: &Value| {
        let items = body["data"].as_array().cloned().unwrap_or_default();
        let results: Vec<Value> = items
            .iter()
            .map(|item| {
                let signature = item["sms_signature"].as_str().unwrap_or_default();
                let refuse = signature == "bad"
                    || (signature == "flaky"
                        && !std::mem::replace(&mut *flaky_refused.lock().unwrap(), true));
                if refuse {
                    return json!({"success": false, "error": "Error in Sender-name", "data": {"id": item["id"]}});
                }
                let text = item["sms_message"].as_str().unwrap_or_default().to_owned();
                accepted
                    .lock()
                    .unwrap()
                    .push((item["phone"].to_string(), text));
                json!({"success": true, "data": {"id": item["id"], "msg_id": item["id"], "data": 1, "parts": 1}})
            })
            .collect();
        Reply::Json(json!({"success": true, "data": results}))
    }
}

fn signed(
    id: u64,
    phone: &str,
    signature: &str,
) -> msgw::transport::proto::StartVerificationRequest {
    let mut r = request(id, phone);
    r.signature = signature.into();
    r
}

async fn a_refused_resend_retried_elsewhere_sends_nothing(on: On) {
    let case = Apps::start(
        on,
        Settings {
            country_limits: "380=2/1h,*=1/1h".parse().unwrap(),
            ..Settings::default()
        },
    )
    .await;
    let accepted: Accepted = Arc::default();
    let flaky_refused = Arc::new(Mutex::new(false));
    for app in &case.apps {
        app.gateway
            .respond_with(gateway(accepted.clone(), flaky_refused.clone()));
    }
    let app = |i: usize| &case.apps[i % case.apps.len()];
    let (p, q) = ("+380971230001", "+37120000100");
    start(app(0), request(1, p)).await.expect("the start");
    let refused = start(app(1), signed(2, p, "bad")).await.unwrap_err();
    assert_eq!(error_info(&refused).0, "UPSTREAM_REJECTED");
    // The refused resend's id with another number, or another request: ALREADY_EXISTS,
    // on any replica, and nothing sent.
    for (i, retry) in [signed(2, q, "msgw"), signed(2, p, "msgw")]
        .into_iter()
        .enumerate()
    {
        let conflict = start(app(i), retry).await.unwrap_err();
        assert_eq!(conflict.code(), Code::AlreadyExists, "{conflict:?}");
    }
    let sent: Vec<String> = accepted
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.0.clone())
        .collect();
    assert_eq!(sent, ["380971230001"], "no code reached {q}");

    // A resend the gateway refuses once, retried as it was: sent, and counted once by
    // the budget (380=2/1h: the start's code and this one), so the next is refused.
    let first = start(app(0), signed(3, p, "flaky")).await.unwrap_err();
    assert_eq!(error_info(&first).0, "UPSTREAM_REJECTED");
    let retried = start(app(1), signed(3, p, "flaky"))
        .await
        .expect("the retry");
    assert_eq!(retried.phone, p);
    let over = start(app(0), signed(4, p, "msgw")).await.unwrap_err();
    assert_eq!(error_info(&over).0, "COUNTRY_RATE_LIMITED", "{over:?}");
    let sent = case
        .metric(
            "msgw_verify_codes_total",
            &[r#"calling_code="380""#, r#"outcome="sent""#],
        )
        .await;
    assert_eq!(sent, 2.0);
    assert_eq!(
        case.metric("msgw_verify_codes_total", &[r#"calling_code="371""#])
            .await,
        0.0
    );

    // The code reached P only, and P's code approves P's verification.
    let texts = accepted.lock().unwrap().clone();
    assert!(
        texts.iter().all(|(to, _)| to == "380971230001"),
        "{texts:?}"
    );
    let code = texts
        .last()
        .unwrap()
        .1
        .rsplit(' ')
        .next()
        .unwrap()
        .to_owned();
    let checked = app(1)
        .verification()
        .check_verification(CheckVerificationRequest {
            phone: p.into(),
            code,
        })
        .await
        .expect("the check")
        .into_inner();
    assert_eq!(checked.verification.unwrap().status, 2, "approved");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_resend_retried_with_another_number_sends_nothing_on_sqlite() {
    a_refused_resend_retried_elsewhere_sends_nothing(On::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_resend_retried_with_another_number_sends_nothing_on_two_postgres_replicas() {
    a_refused_resend_retried_elsewhere_sends_nothing(On::Postgres).await;
}
