//! Response envelope and payload parsing. Tolerant by design: unknown fields are
//! ignored, ids may be numbers or strings, and every payload is also kept verbatim.

use crate::core::ports::gateway::PayloadError;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::Value;

use super::flex;
use crate::core::domain::{
    Balance, Channel, HlrReport, Media, Money, Network, Operation, Output, Reply, ReportedStatus,
    SendReceipt, Sender, SmsTemplate, StatusReport, ViberTemplate, VoiceOtpCall,
};

/// The top level of every answer.
#[derive(Debug, Deserialize)]
pub(super) struct Envelope {
    #[serde(deserialize_with = "flex::bool")]
    pub success: bool,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub data: Option<Vec<ItemResult>>,
}

/// One result of `data`, answering the operation at the same index.
#[derive(Debug, Deserialize)]
pub(super) struct ItemResult {
    #[serde(deserialize_with = "flex::bool")]
    pub success: bool,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub data: Value,
}

/// Turns a successful item's payload into the output of `op`.
pub(super) fn parse_payload(op: &Operation, data: Value) -> Result<Output, PayloadError> {
    let fail = |reason: String| PayloadError::new(super::type_name(op), reason);
    let output = match op {
        Operation::SendSms(_)
        | Operation::SendViber(_)
        | Operation::SendRcs(_)
        | Operation::SendTelegramOtp(_)
        | Operation::SendVoice(_)
        | Operation::SendPipeline(_) => {
            let p: SendPayload = decode(&data).map_err(fail)?;
            Output::Sent(SendReceipt {
                id: p
                    .id
                    .or_else(|| op.client_id().map(|id| id.get()))
                    .unwrap_or_default(),
                msg_id: p.msg_id.unwrap_or_default(),
                parts: p.parts.unwrap_or_default(),
                raw: data,
                scheduled_for: None,
            })
        }
        Operation::SendVoiceOtp(_) => {
            let p: VoiceOtpPayload = decode(&data).map_err(fail)?;
            let price = match p.price {
                Some(text) => Money::parse(&text, "").map_err(|e| fail(e.to_string()))?,
                None => Money::default(),
            };
            Output::VoiceOtp(VoiceOtpCall {
                code: p.code.unwrap_or_default(),
                price,
                raw: data,
            })
        }
        Operation::GetMessageStatus(id) => {
            let p: StatusPayload = decode(&data).map_err(fail)?;
            let mut replies: Vec<Reply> = p.replies.into_iter().map(Reply::from).collect();
            mark_unreadable_times(&mut replies, p.updated.as_deref());
            Output::Status(StatusReport {
                id: p.id.unwrap_or(id.get()),
                msg_id: p.msg_id,
                channel: p.kind.as_deref().and_then(Channel::from_name),
                channel_raw: p.kind,
                status: p.status.map(ReportedStatus::new),
                updated: p.updated.as_deref().and_then(timestamp),
                replies,
                raw: data,
            })
        }
        Operation::GetBalance => {
            let p: BalancePayload = decode(&data).map_err(fail)?;
            let amount = p.amount.ok_or_else(|| fail("no amount".into()))?;
            Output::Balance(Balance {
                amount: Money::parse(&amount, &p.currency.unwrap_or_default())
                    .map_err(|e| fail(e.to_string()))?,
                raw: data,
            })
        }
        Operation::ListSenders => {
            let items: Vec<SenderPayload> = decode_list(&data).map_err(fail)?;
            Output::Senders {
                senders: items
                    .into_iter()
                    .map(|s| Sender {
                        name: s.name.unwrap_or_default(),
                        status: s.status.unwrap_or_default(),
                    })
                    .collect(),
                raw: data,
            }
        }
        Operation::LookupHlr(_) => {
            let p: HlrPayload = decode(&data).map_err(fail)?;
            let network = p.network.unwrap_or_default();
            Output::Hlr(HlrReport {
                phone: p.phone.unwrap_or_default(),
                status: p.status.map(ReportedStatus::new),
                imsi: p.imsi.unwrap_or_default(),
                mccmnc: p.mccmnc.unwrap_or_default(),
                ported: p.ported.unwrap_or_default(),
                origin: network.origin.map(Network::from),
                ported_to: network.ported.map(Network::from),
                raw: data,
            })
        }
        Operation::CreateSmsTemplate { .. } => {
            Output::SmsTemplate(sms_template(data).map_err(fail)?)
        }
        Operation::ListSmsTemplates => {
            let templates = list_items(&data)
                .map(|item| sms_template(item.clone()))
                .collect::<Result<_, _>>()
                .map_err(fail)?;
            Output::SmsTemplates {
                templates,
                raw: data,
            }
        }
        Operation::CreateViberTemplate { .. } => {
            Output::ViberTemplate(viber_template(data).map_err(fail)?)
        }
        Operation::ListViberTemplates => {
            let templates = list_items(&data)
                .map(|item| viber_template(item.clone()))
                .collect::<Result<_, _>>()
                .map_err(fail)?;
            Output::ViberTemplates {
                templates,
                raw: data,
            }
        }
        Operation::DeleteSmsTemplates(_) | Operation::DeleteViberTemplates(_) => {
            let p: DeletedPayload = decode(&data).map_err(fail)?;
            Output::Deleted {
                count: p.deleted.unwrap_or_default(),
                raw: data,
            }
        }
    };
    Ok(output)
}

fn decode<T: for<'de> Deserialize<'de>>(data: &Value) -> Result<T, String> {
    if !data.is_object() {
        return Err(format!("expected a JSON object, got {}", kind_of(data)));
    }
    T::deserialize(data).map_err(|e| e.to_string())
}

fn decode_list<T: for<'de> Deserialize<'de>>(data: &Value) -> Result<Vec<T>, String> {
    list_items(data)
        .map(|item| T::deserialize(item).map_err(|e| e.to_string()))
        .collect()
}

/// The items of a list payload. The gateway documents an array; an empty or
/// missing payload is an empty list, and an object is taken as a map of items.
fn list_items(data: &Value) -> Box<dyn Iterator<Item = &Value> + '_> {
    match data {
        Value::Array(items) => Box::new(items.iter()),
        Value::Object(map) => Box::new(map.values().filter(|v| v.is_object())),
        _ => Box::new(std::iter::empty()),
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Parses a date-time: RFC 3339, or the other ISO 8601 forms the gateway may send
/// ([`super::iso8601`]: `+hhmm`, `+hh`, basic format, a space for the `T`, no offset
/// meaning UTC); an unparseable value stays in `raw`. So does one outside years 1 to
/// 9999 in UTC: what `google.protobuf.Timestamp` (and RFC 3339 itself) can represent, so
/// every client can read what msgw passes on.
pub(crate) fn timestamp(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
        .or_else(|| super::iso8601::parse(s))
        .filter(crate::core::domain::representable)
}

/// Whether a date-time was given (not absent or blank) but cannot be read.
fn unreadable(s: Option<&str>) -> bool {
    s.is_some_and(|s| !s.trim().is_empty() && timestamp(s).is_none())
}

/// Marks the replies whose time cannot be read: their own `datetime` was given and is
/// unreadable, or they have none and the report's `updated` (their time then) is.
pub(crate) fn mark_unreadable_times(replies: &mut [Reply], updated: Option<&str>) {
    let updated_unreadable = unreadable(updated);
    for reply in replies {
        if reply.datetime.is_none() && !reply.time_unreadable {
            reply.time_unreadable = updated_unreadable;
        }
    }
}

fn sms_template(data: Value) -> Result<SmsTemplate, String> {
    let p: SmsTemplatePayload = decode(&data)?;
    Ok(SmsTemplate {
        id: p.id.unwrap_or_default(),
        name: p.name.unwrap_or_default(),
        text: p.template.unwrap_or_default(),
        chars: p.chars.unwrap_or_default(),
        parts: p.parts.unwrap_or_default(),
        created: p.created.as_deref().and_then(timestamp),
        raw: data,
    })
}

fn viber_template(data: Value) -> Result<ViberTemplate, String> {
    let p: ViberTemplatePayload = decode(&data)?;
    Ok(ViberTemplate {
        id: p.id.unwrap_or_default(),
        text: p.template.unwrap_or_default(),
        signature: p.signature.unwrap_or_default(),
        status: p.status.unwrap_or_default(),
        raw: data,
    })
}

#[derive(Deserialize)]
struct SendPayload {
    #[serde(default, deserialize_with = "flex::opt_u64")]
    id: Option<u64>,
    #[serde(default, deserialize_with = "flex::opt_string")]
    msg_id: Option<String>,
    #[serde(default, deserialize_with = "flex::opt_u32")]
    parts: Option<u32>,
}

#[derive(Deserialize)]
struct VoiceOtpPayload {
    #[serde(default, deserialize_with = "flex::opt_code")]
    code: Option<String>,
    #[serde(default, deserialize_with = "flex::opt_decimal")]
    price: Option<String>,
}

/// A message's status as the gateway reports it, both in a `status` answer and in a
/// delivery webhook (which adds fields of its own, webhook.rs).
#[derive(Deserialize)]
pub(crate) struct StatusPayload {
    #[serde(default, deserialize_with = "flex::opt_u64")]
    pub(crate) id: Option<u64>,
    #[serde(default, deserialize_with = "flex::opt_string")]
    pub(crate) msg_id: Option<String>,
    #[serde(default, rename = "type", deserialize_with = "flex::opt_string")]
    pub(crate) kind: Option<String>,
    #[serde(default, deserialize_with = "flex::opt_string")]
    pub(crate) status: Option<String>,
    #[serde(default, deserialize_with = "flex::opt_string")]
    pub(crate) updated: Option<String>,
    #[serde(default, deserialize_with = "flex::list")]
    pub(crate) replies: Vec<ReplyPayload>,
}

/// A reply of `replies`, shared with the delivery webhook body.
#[derive(Debug, Deserialize)]
pub(crate) struct ReplyPayload {
    #[serde(default, deserialize_with = "flex::opt_string")]
    datetime: Option<String>,
    #[serde(default, deserialize_with = "flex::opt_string")]
    message: Option<String>,
    #[serde(default)]
    media: Option<MediaPayload>,
}

#[derive(Debug, Deserialize)]
struct MediaPayload {
    #[serde(default, deserialize_with = "flex::opt_string")]
    url: Option<String>,
    #[serde(default, deserialize_with = "flex::opt_string")]
    filename: Option<String>,
    #[serde(default, deserialize_with = "flex::opt_u64")]
    filesize: Option<u64>,
}

impl From<ReplyPayload> for Reply {
    fn from(r: ReplyPayload) -> Self {
        Self {
            datetime: r.datetime.as_deref().and_then(timestamp),
            time_unreadable: unreadable(r.datetime.as_deref()),
            message: r.message,
            media: r.media.map(|m| Media {
                url: m.url.unwrap_or_default(),
                filename: m.filename.unwrap_or_default(),
                filesize: m.filesize.unwrap_or_default(),
            }),
        }
    }
}

#[derive(Deserialize)]
struct BalancePayload {
    #[serde(default, deserialize_with = "flex::opt_decimal")]
    amount: Option<String>,
    #[serde(default, deserialize_with = "flex::opt_string")]
    currency: Option<String>,
}

#[derive(Deserialize)]
struct SenderPayload {
    #[serde(default, deserialize_with = "flex::opt_string")]
    name: Option<String>,
    #[serde(default, deserialize_with = "flex::opt_string")]
    status: Option<String>,
}

#[derive(Deserialize)]
struct HlrPayload {
    #[serde(default, deserialize_with = "flex::opt_string")]
    phone: Option<String>,
    #[serde(default, deserialize_with = "flex::opt_string")]
    status: Option<String>,
    #[serde(default, deserialize_with = "flex::opt_string")]
    imsi: Option<String>,
    #[serde(default, deserialize_with = "flex::opt_string")]
    mccmnc: Option<String>,
    #[serde(default, deserialize_with = "flex::opt_bool")]
    ported: Option<bool>,
    #[serde(default)]
    network: Option<HlrNetworks>,
}

#[derive(Deserialize, Default)]
struct HlrNetworks {
    #[serde(default)]
    origin: Option<NetworkPayload>,
    #[serde(default)]
    ported: Option<NetworkPayload>,
}

#[derive(Deserialize)]
struct NetworkPayload {
    #[serde(default, deserialize_with = "flex::opt_string")]
    name: Option<String>,
    #[serde(default, deserialize_with = "flex::opt_u32")]
    prefix: Option<u32>,
    #[serde(default)]
    country: Option<CountryPayload>,
}

#[derive(Deserialize)]
struct CountryPayload {
    #[serde(default, deserialize_with = "flex::opt_string")]
    name: Option<String>,
    #[serde(default, deserialize_with = "flex::opt_u32")]
    prefix: Option<u32>,
}

impl From<NetworkPayload> for Network {
    fn from(n: NetworkPayload) -> Self {
        let country = n.country.unwrap_or(CountryPayload {
            name: None,
            prefix: None,
        });
        Self {
            name: n.name.unwrap_or_default(),
            prefix: n.prefix.unwrap_or_default(),
            country_name: country.name.unwrap_or_default(),
            country_prefix: country.prefix.unwrap_or_default(),
        }
    }
}

#[derive(Deserialize)]
struct SmsTemplatePayload {
    #[serde(default, deserialize_with = "flex::opt_string")]
    id: Option<String>,
    #[serde(default, deserialize_with = "flex::opt_string")]
    name: Option<String>,
    #[serde(default, alias = "text", deserialize_with = "flex::opt_string")]
    template: Option<String>,
    #[serde(default, alias = "length", deserialize_with = "flex::opt_u32")]
    chars: Option<u32>,
    #[serde(default, deserialize_with = "flex::opt_u32")]
    parts: Option<u32>,
    #[serde(default, alias = "created_at", deserialize_with = "flex::opt_string")]
    created: Option<String>,
}

#[derive(Deserialize)]
struct ViberTemplatePayload {
    #[serde(default, deserialize_with = "flex::opt_u64")]
    id: Option<u64>,
    #[serde(default, alias = "text", deserialize_with = "flex::opt_string")]
    template: Option<String>,
    #[serde(default, deserialize_with = "flex::opt_string")]
    signature: Option<String>,
    #[serde(default, alias = "moderation", deserialize_with = "flex::opt_string")]
    status: Option<String>,
}

#[derive(Deserialize)]
struct DeletedPayload {
    #[serde(default, deserialize_with = "flex::opt_u32")]
    deleted: Option<u32>,
}
