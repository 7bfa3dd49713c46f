//! Shared helpers: a sandbox served on port 0 and a webhook receiver.
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use msgw::sandbox::{Sandbox, SandboxConfig, serve};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

/// How long a test waits for something that should happen within milliseconds.
pub const WAIT: Duration = Duration::from_secs(10);

/// Sandbox settings for tests: fast steps and retries.
pub fn test_config() -> SandboxConfig {
    SandboxConfig {
        step_delay: Duration::from_millis(5),
        webhook_backoff: Duration::from_millis(5),
        ..SandboxConfig::default()
    }
}

/// A sandbox served on 127.0.0.1:0.
pub struct TestSandbox {
    pub url: String,
    pub sandbox: Sandbox,
    pub client: reqwest::Client,
    shutdown: Option<oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

pub async fn spawn_sandbox(config: SandboxConfig) -> TestSandbox {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let sandbox = Sandbox::new(config);
    let (tx, rx) = oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, sandbox.clone(), async move {
        let _ = rx.await;
    }));
    TestSandbox {
        url: format!("http://{addr}/api/json.php"),
        sandbox,
        client: reqwest::Client::new(),
        shutdown: Some(tx),
        server: Some(server),
    }
}

impl TestSandbox {
    /// POSTs raw bytes with an optional Content-Type; returns the JSON reply.
    pub async fn post_raw(
        &self,
        content_type: Option<&str>,
        body: impl Into<reqwest::Body>,
    ) -> Value {
        let mut req = self.client.post(&self.url).body(body);
        if let Some(ct) = content_type {
            req = req.header("Content-Type", ct);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 200, "the gateway always answers HTTP 200");
        resp.json().await.unwrap()
    }

    /// POSTs an envelope value as JSON.
    pub async fn envelope(&self, envelope: Value) -> Value {
        self.post_raw(Some("application/json"), envelope.to_string())
            .await
    }

    /// Sends `ops` with the right key; returns the result items.
    pub async fn ops(&self, ops: Vec<Value>) -> Vec<Value> {
        let reply = self
            .envelope(json!({"auth": self.sandbox.api_key(), "data": ops}))
            .await;
        assert_eq!(reply["success"], true, "envelope refused: {reply}");
        reply["data"].as_array().unwrap().clone()
    }

    /// Sends one operation; returns its result item.
    pub async fn op(&self, op: Value) -> Value {
        let mut items = self.ops(vec![op]).await;
        assert_eq!(items.len(), 1);
        items.remove(0)
    }

    /// Sends one operation that must succeed; returns its payload.
    pub async fn ok(&self, op: Value) -> Value {
        let item = self.op(op.clone()).await;
        assert_eq!(item["success"], true, "{op} failed: {item}");
        item["data"].clone()
    }

    /// Sends one operation that must fail; returns its error text.
    pub async fn err(&self, op: Value) -> String {
        let item = self.op(op.clone()).await;
        assert_eq!(item["success"], false, "{op} should fail: {item}");
        item["error"].as_str().unwrap().to_owned()
    }

    /// Balance amount reported by the `balance` operation.
    pub async fn balance(&self) -> f64 {
        self.ok(json!({"type": "balance"})).await["amount"]
            .as_f64()
            .unwrap()
    }

    /// Polls `status` until the message reaches `status`; returns that payload.
    pub async fn wait_status(&self, id: u64, status: &str) -> Value {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let item = self.op(json!({"type": "status", "id": id})).await;
            if item["data"]["status"] == status {
                return item["data"].clone();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "message {id} never reached {status}: {item}"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Stops the server and waits for `serve` to return.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(server) = self.server.take() {
            tokio::time::timeout(WAIT, server)
                .await
                .unwrap()
                .unwrap()
                .unwrap();
        }
    }
}

/// One webhook POST as the receiver saw it.
#[derive(Debug, Clone)]
pub struct Received {
    pub body: Value,
    pub content_type: String,
    /// Whether the receiver answered 200.
    pub acknowledged: bool,
}

/// A webhook receiver on 127.0.0.1:0 that refuses the first `fail_first` POSTs.
pub struct Receiver {
    pub url: String,
    rx: mpsc::UnboundedReceiver<Received>,
}

#[derive(Clone)]
struct ReceiverState {
    tx: mpsc::UnboundedSender<Received>,
    fail_first: usize,
    seen: Arc<AtomicUsize>,
}

pub async fn spawn_receiver(fail_first: usize) -> Receiver {
    async fn hook(
        State(state): State<ReceiverState>,
        headers: axum::http::HeaderMap,
        Json(body): Json<Value>,
    ) -> StatusCode {
        let n = state.seen.fetch_add(1, Ordering::SeqCst);
        let acknowledged = n >= state.fail_first;
        let content_type = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let _ = state.tx.send(Received {
            body,
            content_type,
            acknowledged,
        });
        if acknowledged {
            StatusCode::OK
        } else {
            StatusCode::INTERNAL_SERVER_ERROR
        }
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let state = ReceiverState {
        tx,
        fail_first,
        seen: Arc::new(AtomicUsize::new(0)),
    };
    let app = axum::Router::new()
        .route("/hook", post(hook))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    Receiver {
        url: format!("http://{addr}/hook"),
        rx,
    }
}

impl Receiver {
    /// The next POST received (acknowledged or not).
    pub async fn next(&mut self) -> Received {
        tokio::time::timeout(WAIT, self.rx.recv())
            .await
            .expect("no webhook arrived in time")
            .expect("receiver closed")
    }

    /// The body of the next POST received.
    pub async fn next_body(&mut self) -> Value {
        self.next().await.body
    }

    /// Whether a POST is already waiting.
    pub fn try_next(&mut self) -> Option<Received> {
        self.rx.try_recv().ok()
    }
}

/// A valid SMS operation to `phone` with client id `id`.
pub fn sms(id: u64, phone: u64) -> Value {
    json!({"type": "sms", "id": id, "phone": phone, "sms_message": "Hello", "sms_signature": "msgw"})
}

/// A valid Viber text operation.
pub fn viber_text(id: u64, phone: u64) -> Value {
    json!({"type": "viber", "id": id, "phone": phone, "viber_signature": "msgw",
           "viber_type": "text", "viber_message": "Hello"})
}

/// `op` with `hook` set.
pub fn hooked(mut op: Value, url: &str) -> Value {
    op["hook"] = json!(url);
    op
}
