//! A fake gateway that remembers what it carried out, so its `status` knows exactly
//! those messages, like the real one, and that misbehaves on demand: it loses
//! answers, goes down, resets connections, or queues sends for a while while it
//! answers `status` at once (real gateways do this under load).

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU8, AtomicU64, Ordering},
    },
    time::Duration,
};

use serde_json::{Value, json};

use crate::helpers::{FakeGateway, Reply};

/// How the gateway behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Carries out every operation and answers.
    Normal,
    /// Carries out every operation, then loses the answer (HTTP 502).
    LoseAnswers,
    /// Answers HTTP 502 without carrying anything out.
    Down,
    /// Refuses sends whose signature is not `msgw` with `Error in Sender-name`.
    StrictSender,
    /// Carries out every operation, then breaks the connection mid-answer.
    ResetAfter,
    /// Breaks the connection without carrying anything out.
    Reset,
    /// Queues a request with sends for `Remembering::slow` before carrying it out and
    /// answering; a request of status queries only after `Remembering::slow_status`.
    SlowSends,
}

impl Mode {
    const ALL: [Mode; 7] = [
        Mode::Normal,
        Mode::LoseAnswers,
        Mode::Down,
        Mode::StrictSender,
        Mode::ResetAfter,
        Mode::Reset,
        Mode::SlowSends,
    ];
}

/// A gateway that remembers what it accepted: sends get msg ids counting from
/// 500000001, and `status` knows exactly those ids.
#[derive(Clone)]
pub struct Remembering {
    mode: Arc<AtomicU8>,
    /// Client id → msg id of every message carried out.
    pub accepted: Arc<Mutex<HashMap<u64, u64>>>,
    /// How many times each client id was carried out (a send reaching it twice is a
    /// double send).
    pub sends: Arc<Mutex<HashMap<u64, usize>>>,
    /// How long `SlowSends` queues a request with sends.
    pub slow: Arc<Mutex<Duration>>,
    /// How long `SlowSends` takes to answer a request of status queries only.
    pub slow_status: Arc<Mutex<Duration>>,
    /// The status `status` reports for a known message.
    pub status: Arc<Mutex<&'static str>>,
    /// The error `status` answers for a message the gateway does not know.
    pub unknown_says: Arc<Mutex<&'static str>>,
}

impl Remembering {
    /// Makes `gateway` remember.
    pub fn install(gateway: &FakeGateway) -> Self {
        let remembering = Self {
            mode: Arc::new(AtomicU8::new(0)),
            accepted: Arc::default(),
            sends: Arc::default(),
            slow: Arc::new(Mutex::new(Duration::from_secs(3))),
            slow_status: Arc::new(Mutex::new(Duration::ZERO)),
            status: Arc::new(Mutex::new("ACCEPTED")),
            unknown_says: Arc::new(Mutex::new("Message not found")),
        };
        let next = Arc::new(AtomicU64::new(500_000_001));
        let r = remembering.clone();
        gateway.respond_with(move |body| {
            let mode = r.mode();
            let items = body["data"].as_array().cloned().unwrap_or_default();
            let sends = items.iter().any(|i| i["type"] != "status");
            let carry_out = {
                let (r, next) = (r.clone(), next.clone());
                move || r.carry_out(&items, mode, &next)
            };
            match mode {
                Mode::Down => Reply::Http(502, "bad gateway"),
                Mode::Reset => Reply::Reset,
                Mode::LoseAnswers => {
                    carry_out();
                    Reply::Http(502, "bad gateway")
                }
                Mode::ResetAfter => {
                    carry_out();
                    Reply::Reset
                }
                Mode::SlowSends => {
                    let slow = if sends { &r.slow } else { &r.slow_status };
                    let slow = *slow.lock().unwrap();
                    Reply::Later(slow, Box::new(move || Reply::Json(carry_out())))
                }
                _ => Reply::Json(carry_out()),
            }
        });
        remembering
    }

    pub fn set(&self, mode: Mode) {
        let index = Mode::ALL.iter().position(|m| *m == mode).unwrap();
        self.mode.store(index as u8, Ordering::SeqCst);
    }

    fn mode(&self) -> Mode {
        Mode::ALL[usize::from(self.mode.load(Ordering::SeqCst))]
    }

    /// How many times the gateway carried out client id `id`.
    pub fn sends_of(&self, id: u64) -> usize {
        self.sends.lock().unwrap().get(&id).copied().unwrap_or(0)
    }

    /// Carries out a request's operations now; the answer envelope.
    fn carry_out(&self, items: &[Value], mode: Mode, next: &AtomicU64) -> Value {
        let results: Vec<Value> = items
            .iter()
            .map(|item| {
                let id = item["id"].as_u64().unwrap_or_default();
                match item["type"].as_str().unwrap_or_default() {
                    "status" => match self.accepted.lock().unwrap().get(&id) {
                        Some(msg_id) => json!({"success": true, "data": {
                            "id": id.to_string(), "msg_id": msg_id, "type": "sms",
                            "status": *self.status.lock().unwrap()}}),
                        None => json!({"success": false, "error": *self.unknown_says.lock().unwrap(), "data": {"id": id}}),
                    },
                    "balance" => json!({"success": true, "data": {"amount": 31.1683, "currency": "UAH"}}),
                    "call/otp" => {
                        self.remember(id, 0);
                        json!({"success": true, "data": {"code": "0471", "price": 0.2}})
                    }
                    _ if mode == Mode::StrictSender
                        && item["sms_signature"].as_str() != Some("msgw") =>
                    {
                        json!({"success": false, "error": "Error in Sender-name", "data": {"id": id}})
                    }
                    _ => {
                        let msg_id = next.fetch_add(1, Ordering::SeqCst);
                        self.remember(id, msg_id);
                        json!({"success": true, "data": {"id": id, "msg_id": msg_id, "data": 1, "parts": 2}})
                    }
                }
            })
            .collect();
        json!({"success": true, "data": results})
    }

    fn remember(&self, id: u64, msg_id: u64) {
        self.accepted.lock().unwrap().insert(id, msg_id);
        *self.sends.lock().unwrap().entry(id).or_default() += 1;
    }
}
