//! The one fake gateway of the tests and benchmarks: `POST /api/json.php` on
//! 127.0.0.1:0, answering with whatever the test sets (a plausible success for every
//! operation by default), recording each request, the most answered at once, the time
//! each answer took and the connections msgw opened.
#![allow(dead_code)]

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, State};
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use axum::routing::post;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::wait::until;

/// How long the waits of the fake gateway's owner last before they fail the test.
const WAIT: Duration = Duration::from_secs(10);

/// The API key the tests configure.
pub const API_KEY: &str = "test-key-5f0c";

/// One request as the fake gateway received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// When it arrived.
    pub at: Instant,
    pub path: String,
    pub content_type: Option<String>,
    pub body: Value,
}

/// What the fake gateway answers.
pub enum Reply {
    /// HTTP 200 with this JSON.
    Json(Value),
    /// This HTTP status and raw body.
    Http(u16, &'static str),
    /// Wait, then answer.
    After(Duration, Box<Reply>),
    /// Queue the request, then decide the answer (what the gateway does happens then,
    /// even if msgw has hung up meanwhile, as a real gateway's queue would).
    Later(Duration, Box<dyn FnOnce() -> Reply + Send>),
    /// Break the connection after the request arrived: headers, then a body that fails.
    Reset,
}

type Responder = Arc<dyn Fn(&Value) -> Reply + Send + Sync>;

#[derive(Clone)]
struct GatewayState {
    /// Every request, unless the gateway is told to keep none (long benchmarks).
    requests: Arc<Mutex<Vec<Recorded>>>,
    keep_requests: Arc<Mutex<bool>>,
    responder: Arc<Mutex<Responder>>,
    /// Requests being answered now, and the most at once.
    concurrency: Arc<Mutex<(usize, usize)>>,
    /// Waited before each answer on a thread (tens of µs of precision, where a tokio
    /// timer has 1 ms ticks), so a benchmark's latency is what the gateway takes.
    latency: Arc<Mutex<Duration>>,
    /// How long each answer took.
    answered: Arc<Mutex<Vec<Duration>>>,
    /// The connections that sent a request since the last `take_peers`.
    peers: Arc<Mutex<HashSet<SocketAddr>>>,
}

/// A gateway stand-in on 127.0.0.1:0.
pub struct FakeGateway {
    pub url: String,
    state: GatewayState,
}

impl FakeGateway {
    /// Starts it on the current runtime.
    pub async fn start() -> Self {
        let state = GatewayState {
            requests: Arc::default(),
            keep_requests: Arc::new(Mutex::new(true)),
            responder: Arc::new(Mutex::new(Arc::new(default_reply))),
            concurrency: Arc::default(),
            latency: Arc::default(),
            answered: Arc::default(),
            peers: Arc::default(),
        };
        let app = Router::new()
            .route("/api/json.php", post(handle))
            .fallback(|| async { (axum::http::StatusCode::NOT_FOUND, "no such path") })
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .await
            .unwrap()
        });
        Self {
            url: format!("http://{addr}"),
            state,
        }
    }

    /// The same gateway on a thread and runtime of its own, so the time it records a
    /// request arriving is not held up by the test's own load (as a real gateway on
    /// another machine would not be).
    pub fn start_apart() -> Self {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let _ = tx.send(Self::start().await);
                std::future::pending::<()>().await;
            });
        });
        rx.recv().expect("the gateway's thread starts it")
    }

    /// A gateway for a benchmark: every send accepted with a new msg_id, after
    /// `latency`, no request kept.
    pub async fn accepting_sends(latency: Duration) -> Self {
        let gateway = Self::start().await;
        gateway.respond_with(counting_sends());
        gateway.set_latency(latency);
        *gateway.state.keep_requests.lock().unwrap() = false;
        gateway
    }

    /// Answers every request with `f(request body)`.
    pub fn respond_with(&self, f: impl Fn(&Value) -> Reply + Send + Sync + 'static) {
        *self.state.responder.lock().unwrap() = Arc::new(f);
    }

    /// Answers every request with this JSON.
    pub fn respond_json(&self, v: Value) {
        self.respond_with(move |_| Reply::Json(v.clone()));
    }

    /// Waits `latency` (on a thread, precisely) before each answer.
    pub fn set_latency(&self, latency: Duration) {
        *self.state.latency.lock().unwrap() = latency;
    }

    /// The most requests the gateway was answering at once.
    pub fn most_concurrent(&self) -> usize {
        self.state.concurrency.lock().unwrap().1
    }

    /// Waits until the gateway is answering no request; fails the test after 10 s.
    pub async fn idle(&self) {
        let failure = "the fake gateway was still answering";
        until(WAIT, failure, || {
            self.state.concurrency.lock().unwrap().0 == 0
        })
        .await;
    }

    /// How long each answer took since the last call, in the order they were given.
    pub fn take_answer_times(&self) -> Vec<Duration> {
        std::mem::take(&mut *self.state.answered.lock().unwrap())
    }

    /// The connections that sent a request since the last call.
    pub fn take_peers(&self) -> usize {
        std::mem::take(&mut *self.state.peers.lock().unwrap()).len()
    }

    /// The operations of every request so far, request by request.
    pub fn envelopes(&self) -> Vec<Vec<Value>> {
        self.requests()
            .iter()
            .map(|r| r.body["data"].as_array().cloned().unwrap_or_default())
            .collect()
    }

    /// Waits until the gateway has received a request; fails the test after 10 s.
    pub async fn first_request(&self) {
        self.requests_at_least(1).await;
    }

    /// Waits until the gateway has received `n` requests; fails the test after 10 s.
    pub async fn requests_at_least(&self, n: usize) {
        let failure = format!("the fake gateway did not receive {n} requests");
        until(WAIT, &failure, || {
            self.state.requests.lock().unwrap().len() >= n
        })
        .await;
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state.requests.lock().unwrap().clone()
    }

    /// Each operation msgw sent (every item of every request) with when it arrived.
    pub fn arrivals(&self) -> Vec<(Instant, Value)> {
        self.requests()
            .into_iter()
            .flat_map(|r| {
                let items = r.body["data"].as_array().cloned().unwrap_or_default();
                items.into_iter().map(move |item| (r.at, item))
            })
            .collect()
    }

    /// The most operations that arrived within any one second.
    pub fn most_in_one_second(&self) -> usize {
        let mut at: Vec<Instant> = self.arrivals().into_iter().map(|(t, _)| t).collect();
        at.sort();
        let mut most = 0;
        let mut start = 0;
        for end in 0..at.len() {
            while at[end].duration_since(at[start]) >= Duration::from_secs(1) {
                start += 1;
            }
            most = most.max(end - start + 1);
        }
        most
    }

    /// The requests of the busiest second: each one's time from the first request
    /// msgw sent, in ms, and its operations (what a failed rate check shows).
    pub fn busiest_second(&self) -> Vec<(u128, usize)> {
        let requests: Vec<(Instant, usize)> = self
            .requests()
            .iter()
            .map(|r| (r.at, r.body["data"].as_array().map_or(0, Vec::len)))
            .collect();
        let Some(first) = requests.iter().map(|(t, _)| *t).min() else {
            return Vec::new();
        };
        let in_second = |start: Instant| {
            requests
                .iter()
                .filter(|(t, _)| *t >= start && t.duration_since(start) < Duration::from_secs(1))
                .map(|(t, n)| (t.duration_since(first).as_millis(), *n))
                .collect::<Vec<_>>()
        };
        requests
            .iter()
            .map(|(t, _)| in_second(*t))
            .max_by_key(|r| r.iter().map(|(_, n)| n).sum::<usize>())
            .unwrap_or_default()
    }

    /// The only operation object msgw sent, after checking the envelope around it.
    pub fn only_item(&self) -> Value {
        let requests = self.requests();
        assert_eq!(
            requests.len(),
            1,
            "expected one upstream request, got {requests:#?}"
        );
        let r = &requests[0];
        assert_eq!(r.path, "/api/json.php");
        assert_eq!(r.content_type.as_deref(), Some("application/json"));
        assert_eq!(r.body["auth"], json!(API_KEY));
        let data = r.body["data"].as_array().expect("data is an array");
        assert_eq!(data.len(), 1, "expected one operation: {data:#?}");
        data[0].clone()
    }
}

async fn handle(
    State(state): State<GatewayState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    let started = Instant::now();
    state.peers.lock().unwrap().insert(peer);
    let latency = *state.latency.lock().unwrap();
    if !latency.is_zero() {
        let _ = tokio::task::spawn_blocking(move || std::thread::sleep(latency)).await;
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if *state.keep_requests.lock().unwrap() {
        state.requests.lock().unwrap().push(Recorded {
            at: started,
            path: "/api/json.php".into(),
            content_type: headers
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            body: body.clone(),
        });
    }
    let responder = state.responder.lock().unwrap().clone();
    let mut reply = responder(&body);
    {
        let mut c = state.concurrency.lock().unwrap();
        c.0 += 1;
        c.1 = c.1.max(c.0);
    }
    struct Done(Arc<Mutex<(usize, usize)>>);
    impl Drop for Done {
        fn drop(&mut self) {
            self.0.lock().unwrap().0 -= 1;
        }
    }
    let _done = Done(state.concurrency.clone());
    loop {
        match reply {
            Reply::Json(v) => {
                state.answered.lock().unwrap().push(started.elapsed());
                return axum::Json(v).into_response();
            }
            Reply::Http(code, text) => {
                return (axum::http::StatusCode::from_u16(code).unwrap(), text).into_response();
            }
            Reply::After(d, next) => {
                tokio::time::sleep(d).await;
                reply = *next;
            }
            Reply::Later(d, decide) => {
                let (done, decided) = oneshot::channel();
                tokio::spawn(async move {
                    tokio::time::sleep(d).await;
                    let _ = done.send(decide());
                });
                reply = decided
                    .await
                    .unwrap_or(Reply::Http(500, "the fake gateway lost its queue"));
            }
            Reply::Reset => {
                let broken = futures_util::stream::once(async {
                    Err::<Bytes, _>(std::io::Error::other(
                        "the fake gateway resets the connection",
                    ))
                });
                return axum::response::Response::builder()
                    .header("content-type", "application/json")
                    .body(axum::body::Body::from_stream(broken))
                    .unwrap();
            }
        }
    }
}

/// A plausible success for every operation of the request, in order.
pub fn default_reply(body: &Value) -> Reply {
    let items = body["data"].as_array().cloned().unwrap_or_default();
    let results: Vec<Value> = items
        .iter()
        .map(|item| {
            let payload = match item["type"].as_str().unwrap_or_default() {
                "balance" => json!({"amount": 31.1683, "currency": "UAH"}),
                "sender" => json!([{"name": "msgw", "status": "Verified by operator"}]),
                "status" => {
                    json!({"id": item["id"], "msg_id": 99, "type": "sms", "status": "DELIVERED"})
                }
                "hlr" => json!({"phone": item["phone"], "status": "DELIVERED"}),
                "call/otp" => json!({"code": "0471", "price": 0.2}),
                "template/create" => json!({"id": 1, "template": item["template"]}),
                "template/viber/create" => json!({"id": 1, "status": "moderation"}),
                "template/list" | "template/viber/list" => json!([]),
                "template/delete" | "template/viber/delete" => json!({"deleted": 1}),
                _ => json!({"id": item["id"], "msg_id": 123456789, "data": 1, "parts": 1}),
            };
            json!({"success": true, "data": payload})
        })
        .collect();
    Reply::Json(json!({"success": true, "data": results}))
}

/// Every item accepted as a send, each with a msg_id of its own.
pub fn counting_sends() -> impl Fn(&Value) -> Reply + Send + Sync + 'static {
    let next_msg_id = AtomicU64::new(100_000_001);
    move |body| {
        let items = body["data"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        let results: Vec<Value> = items
            .iter()
            .map(|item| {
                let msg_id = next_msg_id.fetch_add(1, Ordering::Relaxed);
                json!({"success": true, "data": {"id": item["id"], "msg_id": msg_id, "data": 1, "parts": 1}})
            })
            .collect();
        Reply::Json(json!({"success": true, "data": results}))
    }
}
