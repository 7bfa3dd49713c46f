//! The sandbox's inbox: what each message the sandbox received says (to whom, from
//! whom, its text, parts and encoding, its price, its verification code as the phone
//! would show it) and the statuses it went through, for the web page on msgw's admin
//! port (`/sandbox/`, `routes.rs`) and its JSON twin. A message can be ended by hand
//! (delivered, undeliverable, expired, or replied to): its webhook goes out as the
//! gateway's would, so the event reaches msgw's gRPC stream.

mod page;
mod routes;

use std::sync::Arc;

use serde_json::{Value, json};

use super::billing;
use super::channel::Channel;
use super::delivery;
use super::fields::Fields;
use super::message::{Piece, Target};
use super::state::MessageRecord;
use super::status;
use super::{Inner, Sandbox};

pub use routes::router;

/// Messages the page and the list show at most (newest first).
pub const SHOWN: usize = 200;

/// How a message is ended by hand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    Delivered,
    Undeliverable,
    Expired,
    /// Replied to with this text (`REPLIED`, the text in `replies`).
    Reply(String),
}

impl Ending {
    /// The ending a status name and an optional reply text ask for.
    pub fn parse(status: &str, reply: Option<&str>) -> Option<Self> {
        let reply = reply.map(str::trim).filter(|r| !r.is_empty());
        Some(match (status, reply) {
            (status::DELIVERED, _) => Self::Delivered,
            (status::UNDELIVERABLE, _) => Self::Undeliverable,
            (status::EXPIRED, _) => Self::Expired,
            (status::REPLIED, Some(text)) => Self::Reply(text.chars().take(1000).collect()),
            ("", Some(text)) => Self::Reply(text.chars().take(1000).collect()),
            _ => return None,
        })
    }

    fn status(&self) -> &'static str {
        match self {
            Self::Delivered => status::DELIVERED,
            Self::Undeliverable => status::UNDELIVERABLE,
            Self::Expired => status::EXPIRED,
            Self::Reply(_) => status::REPLIED,
        }
    }
}

/// Why a message cannot be ended by hand.
#[derive(Debug, PartialEq, Eq)]
pub enum EndError {
    /// No message has this client id.
    NotFound,
    /// It was received before the sandbox kept letters: where its webhook goes is unknown.
    NoLetter,
}

/// What each channel of a send shows, from its validated fields: `sms_*`, `viber_*`,
/// `rcs_*` and `message` of a single send, or the channel objects of a `pipeline`.
pub fn pieces(f: &Fields, channels: &[Channel], pipeline: bool) -> Vec<Piece> {
    let text = |f: &Fields, name: &str| f.opt_str(name).ok().flatten().map(str::to_owned);
    channels
        .iter()
        .map(|&channel| {
            let mut piece = Piece {
                channel,
                sender: None,
                text: None,
                extras: Vec::new(),
            };
            if pipeline {
                if let Ok(settings) = f.req_object(channel.name()) {
                    piece.sender = text(&settings, "signature");
                    piece.text = text(&settings, "message");
                    if let Some(kind) = text(&settings, "type") {
                        piece.extras.push(("type".into(), kind));
                    }
                }
                return piece;
            }
            let prefix = match channel {
                Channel::Sms => "sms_",
                Channel::Viber => "viber_",
                Channel::Rcs => "rcs_",
                Channel::Telegram | Channel::Voice | Channel::Whatsapp => {
                    piece.text = text(f, "message");
                    return piece;
                }
            };
            piece.sender = text(f, &format!("{prefix}signature"));
            piece.text = text(f, &format!("{prefix}message"));
            for extra in ["type", "image", "button", "link"] {
                if let Some(value) = text(f, &format!("{prefix}{extra}")) {
                    piece.extras.push((extra.into(), value));
                }
            }
            if channel == Channel::Viber
                && let Ok(Some(slides)) = f.opt_array("viber_carousel")
            {
                piece
                    .extras
                    .push(("carousel".into(), format!("{} slides", slides.len())));
            }
            piece
        })
        .collect()
}

/// Words that say a text carries a one-time code (lower case).
const CODE_WORDS: [&str; 8] = [
    "code",
    "otp",
    "pin",
    "password",
    "passcode",
    "код",
    "пароль",
    "kod",
];

/// The one-time code a message carries as its recipient reads it: a Telegram
/// password, else the first run of 4 to 8 digits standing alone in a text that
/// speaks of a code (`Your verification code is 482910`, not `Order 1042 shipped`).
pub fn code_in(pieces: &[Piece]) -> Option<String> {
    for piece in pieces {
        let Some(text) = &piece.text else { continue };
        if piece.channel == Channel::Telegram {
            return Some(text.clone());
        }
        let lower = text.to_lowercase();
        if !lower
            .split(|c: char| !c.is_alphanumeric())
            .any(|word| CODE_WORDS.contains(&word))
        {
            continue;
        }
        // A run standing alone: not part of a word, a number or a phone number.
        let mut run = String::new();
        let mut alone = true;
        let mut before = ' ';
        for c in text.chars().chain([' ']) {
            if c.is_ascii_digit() {
                if run.is_empty() {
                    alone = !before.is_alphanumeric() && before != '+';
                }
                run.push(c);
            } else {
                if alone && (4..=8).contains(&run.len()) && !c.is_alphanumeric() {
                    return Some(run);
                }
                run.clear();
            }
            before = c;
        }
    }
    None
}

/// Ends the message of client id `id` by hand: its status becomes final now (whatever
/// its delivery was doing, which stops), and its webhook goes out as the gateway's
/// would. A message already final gets the new status and a webhook too: the sandbox
/// is for trying what a service does with each outcome.
pub fn end(sandbox: &Sandbox, id: u64, ending: &Ending) -> Result<MessageRecord, EndError> {
    let inner = &sandbox.inner;
    let (record, letter, account_url) = {
        let mut state = inner.state();
        let letter = state
            .message(id)
            .ok_or(EndError::NotFound)?
            .letter
            .clone()
            .ok_or(EndError::NoLetter)?;
        let replies = match ending {
            // A reply joins the recipient's earlier ones, as the gateway's list keeps
            // them: STOP, then START, then STOP again ends with three replies.
            Ending::Reply(text) => {
                let mut all = state
                    .message(id)
                    .and_then(|m| m.replies.as_ref())
                    .and_then(|r| r.as_array().cloned())
                    .unwrap_or_default();
                all.push(json!({"datetime": status::now_rfc3339(), "message": text}));
                Some(serde_json::Value::Array(all))
            }
            _ => None,
        };
        let record = state
            .end_by_hand(id, ending.status(), replies)
            .ok_or(EndError::NotFound)?;
        (record, letter, state.account_webhook_url.clone())
    };
    tracing::info!(id, status = record.status, "sandbox message ended by hand");
    let body = delivery::webhook_body(id, &record, letter.dtmf, false);
    let url = match &letter.target {
        Target::None => None,
        Target::Hook(url) => Some(url.clone()),
        Target::Account => account_url,
    };
    if let Some(url) = url {
        let inner = inner.clone();
        tokio::spawn(async move {
            // As every webhook: once the status it tells is saved.
            while inner.durable().await.is_err() {
                tokio::time::sleep(inner.config.webhook_backoff).await;
            }
            super::webhook::post(&inner, &url, &body).await;
        });
    }
    Ok(record)
}

/// The messages whose phone or client id matches `query` (digits; a leading `+` is
/// ignored; empty: all), newest first, at most `limit`.
pub fn list(inner: &Inner, query: &str, limit: usize) -> Vec<(u64, MessageRecord)> {
    let query = query.trim().trim_start_matches('+');
    let state = inner.state();
    let mut found: Vec<(u64, MessageRecord)> = state
        .messages
        .iter()
        .filter(|(id, record)| matches(query, **id, record))
        .map(|(id, record)| (*id, record.clone()))
        .collect();
    found.sort_unstable_by_key(|(_, record)| std::cmp::Reverse(record.msg_id));
    found.truncate(limit);
    found
}

/// Whether the message `id` matches `query` (see [`list`]).
pub fn matches(query: &str, id: u64, record: &MessageRecord) -> bool {
    let query = query.trim().trim_start_matches('+');
    query.is_empty()
        || query
            .parse::<u64>()
            .is_ok_and(|q| q == id || q == record.msg_id)
        || record
            .letter
            .as_ref()
            .is_some_and(|l| l.phone.to_string().contains(query))
}

/// The JSON twin of one message (`/sandbox/api/messages/{id}`).
pub fn to_json(inner: &Inner, id: u64, record: &MessageRecord) -> Value {
    let mut out = json!({
        "id": id,
        "msg_id": record.msg_id,
        "channel": record.channel.name(),
        "status": record.status,
        "final": !matches!(record.status, status::ACCEPTED | status::ROUTING),
        "updated": record.updated,
        "timeline": record.timeline,
        "ended_by_hand": record.by_hand,
    });
    if let Some(replies) = &record.replies {
        out["replies"] = replies.clone();
    }
    if let Some(letter) = &record.letter {
        out["received"] = json!(letter.received);
        out["phone"] = json!(letter.phone.to_string());
        out["code"] = json!(letter.code);
        out["cost"] = json!({
            "amount": billing::amount_json(letter.cost),
            "currency": inner.config.currency,
        });
        out["pieces"] = letter
            .pieces
            .iter()
            .map(piece_json)
            .collect::<Vec<_>>()
            .into();
    }
    out
}

fn piece_json(piece: &Piece) -> Value {
    let mut out = json!({"channel": piece.channel.name()});
    if let Some(sender) = &piece.sender {
        out["sender"] = json!(sender);
    }
    if let Some(text) = &piece.text {
        out["text"] = json!(text);
        if piece.channel == Channel::Sms {
            let (size, encoding) = sms_size(text);
            out["parts"] = json!(size.parts);
            out["chars"] = json!(size.chars);
            out["encoding"] = json!(encoding);
        }
    }
    for (name, value) in &piece.extras {
        out[name.as_str()] = json!(value);
    }
    out
}

/// An SMS text's size and its encoding's name.
pub fn sms_size(text: &str) -> (billing::SmsSize, &'static str) {
    let encoding = if billing::is_gsm7(text) {
        "GSM-7"
    } else {
        "UCS-2"
    };
    (billing::sms_size(text), encoding)
}

impl Sandbox {
    /// The inbox page and its JSON twin, to mount on msgw's admin port; live updates
    /// end when `stop` turns true.
    pub fn inbox(&self, stop: tokio::sync::watch::Receiver<bool>) -> axum::Router {
        router(self.clone(), stop)
    }
}

/// Keeps the inbox pages' live updates (`routes.rs`) told of every changed message.
pub(super) fn changed(inner: &Arc<Inner>) -> tokio::sync::broadcast::Receiver<u64> {
    inner.state().changes.subscribe()
}

#[cfg(test)]
mod tests;
