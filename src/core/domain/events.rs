//! Delivery reports (from webhooks or status polling) and the events they become.

use chrono::{DateTime, Utc};

use super::{Channel, ClientId, Cursor, Reply, ReportedStatus};

/// The longest duration `google.protobuf.Duration` holds (10,000 years), seconds.
pub const MAX_DURATION_SECS: f64 = 315_576_000_000.0;

/// Whether every client can represent `t`: years 1 to 9999 in UTC, the range of
/// `google.protobuf.Timestamp` and of RFC 3339 itself.
pub fn representable(t: &DateTime<Utc>) -> bool {
    use chrono::Datelike;
    (1..=9999).contains(&t.year())
}

/// What the gateway said about one message's delivery.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryReport {
    /// The client message id; `None` when neither the report nor msgw's records know it.
    pub client_id: Option<ClientId>,
    /// The gateway's message id.
    pub msg_id: Option<String>,
    /// The channel's name verbatim.
    pub channel_raw: Option<String>,
    /// The status, if reported.
    pub status: Option<ReportedStatus>,
    /// Delivered or read.
    pub success: bool,
    /// Reason of a failure.
    pub error: Option<String>,
    /// When the status changed at the gateway.
    pub updated: Option<DateTime<Utc>>,
    /// Digit pressed by the callee (DTMF).
    pub reply: Option<String>,
    /// Call duration in seconds.
    pub duration_secs: Option<f64>,
    /// Identifier of an asynchronous request.
    pub request_id: Option<String>,
    /// Replies of the recipient.
    pub replies: Vec<Reply>,
}

impl DeliveryReport {
    /// The channel, if msgw knows its name.
    pub fn channel(&self) -> Option<Channel> {
        self.channel_raw.as_deref().and_then(Channel::from_name)
    }
}

/// Where msgw learned a status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventSource {
    /// A gateway webhook.
    Webhook,
    /// Polling the `status` operation.
    Poll,
    /// msgw itself (a scheduled message: scheduled, cancelled, or refused as it left).
    Msgw,
}

impl EventSource {
    /// Stable name, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Webhook => "webhook",
            Self::Poll => "poll",
            Self::Msgw => "msgw",
        }
    }

    /// The source of a stored name.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "webhook" => Some(Self::Webhook),
            "poll" => Some(Self::Poll),
            "msgw" => Some(Self::Msgw),
            _ => None,
        }
    }
}

/// Now, to the millisecond: the precision the event log keeps, so an event reads the
/// same live and replayed.
pub fn received_now() -> DateTime<Utc> {
    chrono::SubsecRound::trunc_subsecs(Utc::now(), 3)
}

/// A delivery report as msgw received it, before it has a cursor.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    /// The report.
    pub report: DeliveryReport,
    /// When msgw received it.
    pub received_at: DateTime<Utc>,
    /// How msgw received it.
    pub source: EventSource,
}

impl NewEvent {
    /// Whether the message will not change any more. The gateway sends webhooks only
    /// for final states, so a webhook with an unknown or missing status counts as final.
    pub fn is_final(&self) -> bool {
        match self.report.status.as_ref().and_then(|s| s.known) {
            Some(status) => status.is_final(),
            None => self.source == EventSource::Webhook,
        }
    }

    /// What makes two reports the same event: the message, its channel and its status.
    /// A repeated webhook, or a poll that sees what a webhook already said, is a duplicate.
    pub fn dedup_key(&self) -> String {
        let r = &self.report;
        let message = match r.client_id {
            Some(id) => id.get().to_string(),
            None => format!("m:{}", r.msg_id.as_deref().unwrap_or_default()),
        };
        format!(
            "{message}|{}|{}",
            r.channel_raw.as_deref().unwrap_or_default(),
            r.status
                .as_ref()
                .map(|s| s.raw.as_str())
                .unwrap_or_default()
        )
    }
}

/// An event of the log: a report with its cursor.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusEvent {
    /// Position in the log, monotonic.
    pub cursor: Cursor,
    /// The caller that sent the message (`None`: unknown, or no caller authentication).
    pub caller: Option<super::CallerName>,
    /// The event.
    pub event: NewEvent,
}

impl From<DeliveryReport> for super::StatusReport {
    /// The status a delivery report tells; `raw` is the report in the gateway's own
    /// field names (no status query was made: this is what the webhook or poll said).
    fn from(r: DeliveryReport) -> Self {
        let raw = raw_report(&r);
        Self {
            id: r.client_id.map_or(0, ClientId::get),
            msg_id: r.msg_id,
            channel: r.channel_raw.as_deref().and_then(Channel::from_name),
            channel_raw: r.channel_raw,
            status: r.status,
            updated: r.updated,
            replies: r.replies,
            raw,
        }
    }
}

/// A report as the gateway's webhook names its fields (fields it did not carry left out).
fn raw_report(r: &DeliveryReport) -> serde_json::Value {
    use serde_json::{Map, Value, json};
    let mut raw = Map::new();
    raw.insert("success".into(), Value::Bool(r.success));
    let mut put = |key: &str, value: Option<Value>| {
        if let Some(value) = value {
            raw.insert(key.into(), value);
        }
    };
    put("id", r.client_id.map(|id| json!(id.get().to_string())));
    put("msg_id", r.msg_id.clone().map(Value::String));
    put("type", r.channel_raw.clone().map(Value::String));
    put("status", r.status.as_ref().map(|s| json!(s.raw)));
    put("error", r.error.clone().map(Value::String));
    put("updated", r.updated.map(|t| json!(t.to_rfc3339())));
    put("reply", r.reply.clone().map(Value::String));
    put("duration", r.duration_secs.map(|d| json!(d)));
    put("request_id", r.request_id.clone().map(Value::String));
    if !r.replies.is_empty() {
        let replies = r
            .replies
            .iter()
            .map(|reply| {
                let mut item = Map::new();
                if let Some(t) = reply.datetime {
                    item.insert("datetime".into(), json!(t.to_rfc3339()));
                }
                if let Some(m) = &reply.message {
                    item.insert("message".into(), json!(m));
                }
                if let Some(m) = &reply.media {
                    item.insert(
                        "media".into(),
                        json!({"url": m.url, "filename": m.filename, "filesize": m.filesize}),
                    );
                }
                Value::Object(item)
            })
            .collect();
        put("replies", Some(Value::Array(replies)));
    }
    Value::Object(raw)
}

impl From<StatusEvent> for super::Waited {
    fn from(e: StatusEvent) -> Self {
        Self {
            is_final: e.event.is_final(),
            report: e.event.report.into(),
        }
    }
}
