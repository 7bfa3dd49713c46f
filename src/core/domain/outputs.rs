//! What the gateway answers, in msgw's terms. Every output keeps the gateway's
//! payload verbatim in `raw`, so fields msgw does not model are never lost.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{Channel, ReportedStatus};

/// Accepted send.
#[derive(Debug, Clone, PartialEq)]
pub struct SendReceipt {
    /// The client id.
    pub id: u64,
    /// The gateway's id, as text whatever JSON type it came as.
    pub msg_id: String,
    /// Billed parts; 0 when not reported.
    pub parts: u32,
    /// Payload verbatim.
    pub raw: Value,
    /// Set when msgw keeps the message to send it then (nothing reached the gateway).
    pub scheduled_for: Option<chrono::DateTime<chrono::Utc>>,
}

/// A voice one-time-code call placed.
#[derive(Debug, Clone, PartialEq)]
pub struct VoiceOtpCall {
    /// The code (the calling number's last 4 digits).
    pub code: String,
    /// The fee, exactly (no currency: the gateway does not name it).
    pub price: super::Money,
    /// Payload verbatim.
    pub raw: Value,
}

/// A reply of the recipient.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// When it was written.
    pub datetime: Option<DateTime<Utc>>,
    /// A time was given for it (its own `datetime`, or without one the report's
    /// `updated`) that msgw could not read: its time is unknown, and an opt-in keyword
    /// in it never lifts an opt-out (not kept in the store: it matters only as the
    /// report arrives).
    pub time_unreadable: bool,
    /// Text, if any.
    pub message: Option<String>,
    /// Attached file, if any.
    pub media: Option<Media>,
}

/// A file attached to a reply.
#[derive(Debug, Clone, PartialEq)]
pub struct Media {
    /// Where to fetch it.
    pub url: String,
    /// File name.
    pub filename: String,
    /// Size in bytes.
    pub filesize: u64,
}

/// A message's current status.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusReport {
    /// Client id.
    pub id: u64,
    /// Gateway id, if reported.
    pub msg_id: Option<String>,
    /// The channel's name verbatim.
    pub channel_raw: Option<String>,
    /// The channel, if known.
    pub channel: Option<Channel>,
    /// The status, if reported.
    pub status: Option<ReportedStatus>,
    /// Time of the last change.
    pub updated: Option<DateTime<Utc>>,
    /// Replies (two-way Viber).
    pub replies: Vec<Reply>,
    /// Payload verbatim.
    pub raw: Value,
}

impl StatusReport {
    /// Whether the status is a known final one.
    pub fn is_final(&self) -> bool {
        self.status
            .as_ref()
            .and_then(|s| s.known)
            .is_some_and(super::Status::is_final)
    }
}

/// A status, and whether it is final: a webhook's status msgw does not know is final
/// all the same (the gateway reports final statuses only).
#[derive(Debug, Clone, PartialEq)]
pub struct Waited {
    /// The status.
    pub report: StatusReport,
    /// Whether it will not change any more.
    pub is_final: bool,
}

/// Account balance.
#[derive(Debug, Clone, PartialEq)]
pub struct Balance {
    /// Amount and currency, exactly.
    pub amount: super::Money,
    /// Payload verbatim.
    pub raw: Value,
}

/// A sender name of the account.
#[derive(Debug, Clone, PartialEq)]
pub struct Sender {
    /// The name.
    pub name: String,
    /// Its moderation state verbatim.
    pub status: String,
}

/// A mobile network of an HLR answer.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Network {
    /// Name.
    pub name: String,
    /// Network prefix.
    pub prefix: u32,
    /// Country name.
    pub country_name: String,
    /// Country calling code.
    pub country_prefix: u32,
}

/// An HLR lookup answer.
#[derive(Debug, Clone, PartialEq)]
pub struct HlrReport {
    /// The number, digits.
    pub phone: String,
    /// Reachability.
    pub status: Option<ReportedStatus>,
    /// Subscriber identity, digits.
    pub imsi: String,
    /// MCC+MNC, digits.
    pub mccmnc: String,
    /// Whether the number was ported.
    pub ported: bool,
    /// Issuing network.
    pub origin: Option<Network>,
    /// Current network.
    pub ported_to: Option<Network>,
    /// Payload verbatim.
    pub raw: Value,
}

/// An SMS template.
#[derive(Debug, Clone, PartialEq)]
pub struct SmsTemplate {
    /// Id, as text.
    pub id: String,
    /// Name, if any.
    pub name: String,
    /// Text.
    pub text: String,
    /// Characters.
    pub chars: u32,
    /// Parts.
    pub parts: u32,
    /// Creation time.
    pub created: Option<DateTime<Utc>>,
    /// Item verbatim.
    pub raw: Value,
}

/// A Viber template.
#[derive(Debug, Clone, PartialEq)]
pub struct ViberTemplate {
    /// Id.
    pub id: u64,
    /// Text.
    pub text: String,
    /// Sender name.
    pub signature: String,
    /// Moderation status verbatim.
    pub status: String,
    /// Item verbatim.
    pub raw: Value,
}

/// The result of one operation, one variant per kind of answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// A send was accepted.
    Sent(SendReceipt),
    /// A voice OTP call was placed.
    VoiceOtp(VoiceOtpCall),
    /// A status query.
    Status(StatusReport),
    /// A status waited for (`wait_for_final`): from the event log or a status query.
    Waited(Waited),
    /// The balance.
    Balance(Balance),
    /// Sender names.
    Senders { senders: Vec<Sender>, raw: Value },
    /// An HLR lookup.
    Hlr(HlrReport),
    /// An SMS template created.
    SmsTemplate(SmsTemplate),
    /// SMS templates listed.
    SmsTemplates {
        templates: Vec<SmsTemplate>,
        raw: Value,
    },
    /// A Viber template created.
    ViberTemplate(ViberTemplate),
    /// Viber templates listed.
    ViberTemplates {
        templates: Vec<ViberTemplate>,
        raw: Value,
    },
    /// Templates deleted.
    Deleted { count: u32, raw: Value },
}

/// Where the answer to a query came from: every query RPC's answer says it (the
/// `msgw-answer-source` response metadata), and `msgw_status_answers_total` counts
/// status answers by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AnswerSource {
    /// What msgw itself holds: a final status from a delivery webhook or a reconcile
    /// poll, a scheduled or cancelled message; the gateway was not asked.
    Store,
    /// A gateway lookup this call started.
    Lookup,
    /// A gateway lookup another call had started for the same thing, shared.
    SharedLookup,
    /// The answer of a lookup that ended within the freshness time
    /// (`MSGW_STATUS_FRESHNESS`, `MSGW_ACCOUNT_CACHE`).
    Cache,
}

impl AnswerSource {
    /// Every source.
    pub const ALL: [Self; 4] = [Self::Store, Self::Lookup, Self::SharedLookup, Self::Cache];

    /// As the metadata value and the metric label say it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Store => "store",
            Self::Lookup => "lookup",
            Self::SharedLookup => "shared-lookup",
            Self::Cache => "cache",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::AnswerSource;

    #[test]
    fn the_metrics_count_every_answer_source() {
        assert_eq!(
            AnswerSource::ALL.map(AnswerSource::as_str),
            crate::base::metrics::STATUS_SOURCES
        );
    }
}
