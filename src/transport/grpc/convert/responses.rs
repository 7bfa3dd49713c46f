//! Domain outputs → proto responses.

use chrono::{DateTime, Utc};
use prost_types::{ListValue, Struct, Timestamp, Value as PValue, value::Kind};
use serde_json::Value;

use crate::core::domain::{self, Error, Output, ReportedStatus, Status};
use crate::transport::proto;

/// Converts an operation's output into the response message of its RPC.
pub trait FromOutput: Sized {
    /// Fails only when the output is not the kind the RPC answers with (a bug).
    fn from_output(output: Output) -> Result<Self, Error>;

    /// The response with the parts msgw counted for the request's SMS text, if it has
    /// one (only SendSms answers them).
    fn counted(self, _estimate: Option<domain::SmsEstimate>) -> Self {
        self
    }
}

/// What msgw counted for an operation before sending it: the parts of an SMS text.
/// Only SendSms answers them; every other operation is listed, so a new one is decided
/// here.
pub fn counted_parts(op: &crate::core::domain::Operation) -> Option<domain::SmsEstimate> {
    use crate::core::domain::Operation as Op;
    match op {
        Op::SendSms(sms) => Some(domain::estimate_sms(sms.message.as_str())),
        Op::SendViber(_)
        | Op::SendRcs(_)
        | Op::SendTelegramOtp(_)
        | Op::SendVoice(_)
        | Op::SendVoiceOtp(_)
        | Op::SendPipeline(_)
        | Op::GetMessageStatus(_)
        | Op::GetBalance
        | Op::ListSenders
        | Op::LookupHlr(_)
        | Op::CreateSmsTemplate { .. }
        | Op::ListSmsTemplates
        | Op::DeleteSmsTemplates(_)
        | Op::CreateViberTemplate { .. }
        | Op::ListViberTemplates
        | Op::DeleteViberTemplates(_) => None,
    }
}

fn mismatch(expected: &str, got: &Output) -> Error {
    Error::Internal(format!("expected a {expected} result, got {got:?}"))
}

/// JSON → `google.protobuf.Value`, losslessly for everything JSON can hold
/// (numbers become doubles, as protobuf's Struct defines them).
pub fn json_value(v: &Value) -> PValue {
    let kind = match v {
        Value::Null => Kind::NullValue(0),
        Value::Bool(b) => Kind::BoolValue(*b),
        Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or_default()),
        Value::String(s) => Kind::StringValue(s.clone()),
        Value::Array(items) => Kind::ListValue(ListValue {
            values: items.iter().map(json_value).collect(),
        }),
        Value::Object(map) => Kind::StructValue(Struct {
            fields: map
                .iter()
                .map(|(k, v)| (k.clone(), json_value(v)))
                .collect(),
        }),
    };
    PValue { kind: Some(kind) }
}

fn raw(v: &Value) -> Option<PValue> {
    Some(json_value(v))
}

/// An exact amount as `google.type.Money`.
fn money(m: domain::Money) -> proto::google_type::Money {
    proto::google_type::Money {
        currency_code: m.currency,
        units: m.units,
        nanos: m.nanos,
    }
}

/// A UTC time as a protobuf timestamp.
pub fn timestamp(t: DateTime<Utc>) -> Timestamp {
    Timestamp {
        seconds: t.timestamp(),
        // Always below 2e9 for a valid chrono time, so the cast cannot wrap.
        nanos: t.timestamp_subsec_nanos() as i32,
    }
}

/// The proto enum of a known status.
pub fn status(s: Option<Status>) -> proto::MessageStatus {
    use proto::MessageStatus as P;
    match s {
        None => P::Unspecified,
        Some(s) => match s {
            Status::Accepted => P::Accepted,
            Status::Deleted => P::Deleted,
            Status::Delivered => P::Delivered,
            Status::Expired => P::Expired,
            Status::Filtered => P::Filtered,
            Status::InvalidDestinationAddress => P::InvalidDestinationAddress,
            Status::InvalidSourceAddress => P::InvalidSourceAddress,
            Status::NoRoute => P::NoRoute,
            Status::PartiallyDelivered => P::PartiallyDelivered,
            Status::Queued => P::Queued,
            Status::Read => P::Read,
            Status::Rejected => P::Rejected,
            Status::Replied => P::Replied,
            Status::Routing => P::Routing,
            Status::SimFull => P::SimFull,
            Status::Undeliverable => P::Undeliverable,
            Status::Unknown => P::Unknown,
            Status::Scheduled => P::Scheduled,
            Status::Canceled => P::Canceled,
        },
    }
}

fn reported(s: Option<ReportedStatus>) -> (proto::MessageStatus, String) {
    match s {
        Some(s) => (status(s.known), s.raw),
        None => (proto::MessageStatus::Unspecified, String::new()),
    }
}

/// The proto enum of a channel.
pub fn channel(c: Option<domain::Channel>) -> proto::Channel {
    use domain::Channel as D;
    use proto::Channel as P;
    match c {
        None => P::Unspecified,
        Some(D::Sms) => P::Sms,
        Some(D::Viber) => P::Viber,
        Some(D::Rcs) => P::Rcs,
        Some(D::Telegram) => P::Telegram,
        Some(D::Voice) => P::Voice,
        Some(D::Whatsapp) => P::Whatsapp,
    }
}

/// A reply as proto.
pub fn reply(r: domain::Reply) -> proto::Reply {
    proto::Reply {
        datetime: r.datetime.map(timestamp),
        message: r.message.unwrap_or_default(),
        media: r.media.map(|m| proto::Media {
            url: m.url,
            filename: m.filename,
            filesize: m.filesize,
        }),
    }
}

/// An SMS text's estimate as proto.
pub fn estimate(e: domain::SmsEstimate) -> proto::EstimateSmsResponse {
    proto::EstimateSmsResponse {
        encoding: match e.encoding {
            domain::SmsEncoding::Gsm7 => proto::SmsEncoding::Gsm7,
            domain::SmsEncoding::Ucs2 => proto::SmsEncoding::Ucs2,
        }
        .into(),
        units: e.units,
        parts: e.parts,
        ucs2_characters: e.ucs2_chars.into_iter().map(String::from).collect(),
    }
}

fn receipt(output: Output) -> Result<(Option<proto::SendReceipt>, Option<PValue>), Error> {
    match output {
        Output::Sent(r) => Ok((
            Some(proto::SendReceipt {
                id: r.id,
                msg_id: r.msg_id,
                parts: r.parts,
                scheduled_for: r.scheduled_for.map(timestamp),
            }),
            // A scheduled message has no gateway answer yet.
            if r.scheduled_for.is_some() {
                None
            } else {
                raw(&r.raw)
            },
        )),
        other => Err(mismatch("send", &other)),
    }
}

macro_rules! send_responses {
    ($($t:ty),* $(,)?) => {$(
        impl FromOutput for $t {
            fn from_output(output: Output) -> Result<Self, Error> {
                let (receipt, raw) = receipt(output)?;
                Ok(Self { receipt, raw })
            }
        }
    )*};
}

send_responses!(
    proto::SendViberResponse,
    proto::SendRcsResponse,
    proto::SendTelegramOtpResponse,
    proto::SendVoiceResponse,
    proto::SendPipelineResponse,
);

impl FromOutput for proto::SendSmsResponse {
    fn from_output(output: Output) -> Result<Self, Error> {
        let (receipt, raw) = receipt(output)?;
        Ok(Self {
            receipt,
            raw,
            estimate: None,
        })
    }

    fn counted(self, estimate: Option<domain::SmsEstimate>) -> Self {
        Self {
            estimate: estimate.map(self::estimate),
            ..self
        }
    }
}

impl FromOutput for proto::SendVoiceOtpResponse {
    fn from_output(output: Output) -> Result<Self, Error> {
        match output {
            Output::VoiceOtp(c) => Ok(Self {
                code: c.code,
                price: Some(money(c.price)),
                raw: raw(&c.raw),
            }),
            other => Err(mismatch("voice OTP", &other)),
        }
    }
}

impl FromOutput for proto::GetMessageStatusResponse {
    fn from_output(output: Output) -> Result<Self, Error> {
        match output {
            Output::Status(r) => {
                let is_final = r.is_final();
                Ok(status_response(r, is_final))
            }
            // A final webhook with a status msgw does not know is final all the same.
            Output::Waited(w) => Ok(status_response(w.report, w.is_final)),
            other => Err(mismatch("status", &other)),
        }
    }
}

fn status_response(r: domain::StatusReport, is_final: bool) -> proto::GetMessageStatusResponse {
    let (status, raw_status) = reported(r.status);
    proto::GetMessageStatusResponse {
        id: r.id,
        msg_id: r.msg_id.unwrap_or_default(),
        channel: channel(r.channel).into(),
        raw_channel: r.channel_raw.unwrap_or_default(),
        status: status.into(),
        raw_status,
        updated: r.updated.map(timestamp),
        replies: r.replies.into_iter().map(reply).collect(),
        raw: raw(&r.raw),
        is_final,
    }
}

impl FromOutput for proto::GetBalanceResponse {
    fn from_output(output: Output) -> Result<Self, Error> {
        match output {
            Output::Balance(b) => Ok(Self {
                amount: Some(money(b.amount)),
                raw: raw(&b.raw),
            }),
            other => Err(mismatch("balance", &other)),
        }
    }
}

impl FromOutput for proto::ListSendersResponse {
    fn from_output(output: Output) -> Result<Self, Error> {
        match output {
            Output::Senders { senders, raw: r } => Ok(Self {
                senders: senders
                    .into_iter()
                    .map(|s| proto::Sender {
                        name: s.name,
                        status: s.status,
                    })
                    .collect(),
                raw: raw(&r),
            }),
            other => Err(mismatch("sender list", &other)),
        }
    }
}

fn network(n: domain::Network) -> proto::Network {
    proto::Network {
        name: n.name,
        prefix: n.prefix,
        country: Some(proto::Country {
            name: n.country_name,
            prefix: n.country_prefix,
        }),
    }
}

impl FromOutput for proto::LookupHlrResponse {
    fn from_output(output: Output) -> Result<Self, Error> {
        let Output::Hlr(h) = output else {
            return Err(mismatch("HLR", &output));
        };
        let (status, raw_status) = reported(h.status);
        Ok(Self {
            phone: h.phone,
            status: status.into(),
            raw_status,
            imsi: h.imsi,
            mccmnc: h.mccmnc,
            ported: h.ported,
            origin_network: h.origin.map(network),
            ported_network: h.ported_to.map(network),
            raw: raw(&h.raw),
        })
    }
}

fn sms_template(t: domain::SmsTemplate) -> proto::SmsTemplate {
    proto::SmsTemplate {
        id: t.id,
        name: t.name,
        text: t.text,
        chars: t.chars,
        parts: t.parts,
        create_time: t.created.map(timestamp),
        raw: raw(&t.raw),
    }
}

fn viber_template(t: domain::ViberTemplate) -> proto::ViberTemplate {
    proto::ViberTemplate {
        id: t.id,
        text: t.text,
        signature: t.signature,
        status: t.status,
        raw: raw(&t.raw),
    }
}

impl FromOutput for proto::CreateSmsTemplateResponse {
    fn from_output(output: Output) -> Result<Self, Error> {
        match output {
            Output::SmsTemplate(t) => Ok(Self {
                template: Some(sms_template(t)),
            }),
            other => Err(mismatch("SMS template", &other)),
        }
    }
}

impl FromOutput for proto::ListSmsTemplatesResponse {
    fn from_output(output: Output) -> Result<Self, Error> {
        match output {
            Output::SmsTemplates { templates, raw: r } => Ok(Self {
                templates: templates.into_iter().map(sms_template).collect(),
                raw: raw(&r),
            }),
            other => Err(mismatch("SMS template list", &other)),
        }
    }
}

impl FromOutput for proto::CreateViberTemplateResponse {
    fn from_output(output: Output) -> Result<Self, Error> {
        match output {
            Output::ViberTemplate(t) => Ok(Self {
                template: Some(viber_template(t)),
            }),
            other => Err(mismatch("Viber template", &other)),
        }
    }
}

impl FromOutput for proto::ListViberTemplatesResponse {
    fn from_output(output: Output) -> Result<Self, Error> {
        match output {
            Output::ViberTemplates { templates, raw: r } => Ok(Self {
                templates: templates.into_iter().map(viber_template).collect(),
                raw: raw(&r),
            }),
            other => Err(mismatch("Viber template list", &other)),
        }
    }
}

macro_rules! delete_responses {
    ($($t:ty),* $(,)?) => {$(
        impl FromOutput for $t {
            fn from_output(output: Output) -> Result<Self, Error> {
                match output {
                    Output::Deleted { count, raw: r } => Ok(Self { deleted: count, raw: raw(&r) }),
                    other => Err(mismatch("delete", &other)),
                }
            }
        }
    )*};
}

delete_responses!(
    proto::DeleteSmsTemplatesResponse,
    proto::DeleteViberTemplatesResponse
);
