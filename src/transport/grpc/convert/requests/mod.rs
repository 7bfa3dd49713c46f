//! Proto requests → validated domain operations. Every rule of the gateway's API
//! (docs/gateway.md#validation-rules) is checked here (through the domain's parsers)
//! and every violation is reported with its proto field path.

use prost_types::Duration;

use crate::core::domain::OpKind;
use crate::core::domain::{
    ClientId, Gender, HttpUrl, Lifetime, Operation, OtpCode, Phone, Recipient, Scope, SmsFallback,
    SmsSend, TelegramOtp, Text, TextKind, ValueError, Voice, VoiceSend, estimate_sms,
};
use crate::transport::proto;

mod account;
mod pipeline;
mod viber;

/// Converts a request of one RPC (or one batch item) into its operation.
pub trait IntoOperation {
    /// The kind of operation it asks for: its permission and every other fact are that
    /// kind's, known before the request is parsed.
    const KIND: OpKind;

    /// Checks every field, recording violations in `s`; `None` if any field failed.
    fn into_operation(self, s: &mut Scope<'_>) -> Option<Operation>;

    /// The priority it asks (`msgw.v1.Priority`'s number; 0: the caller's default),
    /// read before it is parsed. Only sends ask one.
    fn asked_priority(&self) -> i32 {
        0
    }
}

/// The text of an EstimateSms request, checked as SendSms checks its `message`.
pub fn estimate_text(r: proto::EstimateSmsRequest, s: &mut Scope<'_>) -> Option<Text> {
    text(s, "message", TextKind::Message, &r.message)
}

/// A list RPC's `page_size`: 0 means `default`, above `max` is a violation.
pub fn page_size(s: &mut Scope<'_>, value: u32, default: u32, max: u32) -> Option<u32> {
    match value {
        0 => Some(default),
        n if n <= max => Some(n),
        _ => {
            s.add("page_size", format!("must be at most {max} (0: {default})"));
            None
        }
    }
}

fn recipient(id: u64, phone: &str, s: &mut Scope<'_>) -> Option<Recipient> {
    let id = s.check("id", ClientId::new(id));
    let phone = s.check("phone", Phone::parse(phone));
    Some(Recipient {
        id: id?,
        phone: phone?,
    })
}

fn text(s: &mut Scope<'_>, field: &str, kind: TextKind, value: &str) -> Option<Text> {
    s.check(field, Text::parse(value, kind))
}

fn url(s: &mut Scope<'_>, field: &str, value: &str) -> Option<HttpUrl> {
    s.check(field, HttpUrl::parse(value))
}

/// A lifetime in whole seconds, bounded by `bounds`; `Some(None)` when unset.
fn lifetime(
    s: &mut Scope<'_>,
    value: Option<Duration>,
    bounds: fn(u64) -> Result<Lifetime, ValueError>,
) -> Option<Option<Lifetime>> {
    let Some(d) = value else { return Some(None) };
    let seconds = match (u64::try_from(d.seconds), d.nanos) {
        (Ok(seconds), 0) => seconds,
        (Err(_), _) => {
            s.add("lifetime", "must not be negative");
            return None;
        }
        (Ok(_), _) => {
            s.add("lifetime", "must be whole seconds");
            return None;
        }
    };
    s.check("lifetime", bounds(seconds)).map(Some)
}

fn sms_fallback(
    s: &mut Scope<'_>,
    field: &str,
    f: Option<proto::SmsFallback>,
) -> Option<SmsFallback> {
    let Some(f) = f else {
        s.add(field, "required");
        return None;
    };
    let mut s = s.child(field);
    let message = text(&mut s, "message", TextKind::Message, &f.message);
    let signature = text(&mut s, "signature", TextKind::Signature, &f.signature);
    Some(SmsFallback {
        message: message?,
        signature: signature?,
    })
}

/// A voice profile (`field`), which must be present.
pub fn voice(s: &mut Scope<'_>, field: &str, v: Option<proto::VoiceProfile>) -> Option<Voice> {
    let Some(v) = v else {
        s.add(field, "required");
        return None;
    };
    let mut s = s.child(field);
    let gender = match proto::VoiceGender::try_from(v.gender) {
        Ok(proto::VoiceGender::Male) => Some(Gender::Male),
        Ok(proto::VoiceGender::Female) => Some(Gender::Female),
        _ => {
            s.add(
                "gender",
                "required: VOICE_GENDER_MALE or VOICE_GENDER_FEMALE",
            );
            None
        }
    };
    let language = text(&mut s, "language", TextKind::Short, &v.language);
    let name = text(&mut s, "name", TextKind::Short, &v.name);
    Some(Voice {
        gender: gender?,
        language: language?,
        name: name?,
    })
}

impl IntoOperation for proto::SendSmsRequest {
    const KIND: OpKind = OpKind::SendSms;

    fn asked_priority(&self) -> i32 {
        self.priority
    }

    fn into_operation(self, s: &mut Scope<'_>) -> Option<Operation> {
        let to = recipient(self.id, &self.phone, s);
        let message = text(s, "message", TextKind::Message, &self.message);
        if let Some(message) = &message
            && self.max_parts > 0
        {
            let estimate = estimate_sms(message.as_str());
            if estimate.parts > self.max_parts {
                s.too_many_parts("message", estimate, self.max_parts);
            }
        }
        let signature = text(s, "signature", TextKind::Signature, &self.signature);
        let lifetime = lifetime(s, self.lifetime, Lifetime::sms);
        Some(Operation::SendSms(SmsSend {
            to: to?,
            message: message?,
            signature: signature?,
            lifetime: lifetime?,
            short_link: self.short_link,
            unsubscribe_link: self.unsubscribe_link,
        }))
    }
}

impl IntoOperation for proto::SendTelegramOtpRequest {
    const KIND: OpKind = OpKind::SendTelegramOtp;

    fn asked_priority(&self) -> i32 {
        self.priority
    }

    fn into_operation(self, s: &mut Scope<'_>) -> Option<Operation> {
        let to = recipient(self.id, &self.phone, s);
        let code = s.check("code", OtpCode::parse(&self.code));
        let lifetime = lifetime(s, self.lifetime, Lifetime::at_least_minute);
        Some(Operation::SendTelegramOtp(TelegramOtp {
            to: to?,
            code: code?,
            lifetime: lifetime?,
        }))
    }
}

impl IntoOperation for proto::SendVoiceRequest {
    const KIND: OpKind = OpKind::SendVoice;

    fn asked_priority(&self) -> i32 {
        self.priority
    }

    fn into_operation(self, s: &mut Scope<'_>) -> Option<Operation> {
        let to = recipient(self.id, &self.phone, s);
        let message = text(s, "message", TextKind::Message, &self.message);
        let voice = voice(s, "voice", self.voice);
        Some(Operation::SendVoice(VoiceSend {
            to: to?,
            message: message?,
            voice: voice?,
            dtmf: self.dtmf,
        }))
    }
}

impl IntoOperation for proto::SendVoiceOtpRequest {
    const KIND: OpKind = OpKind::SendVoiceOtp;

    fn asked_priority(&self) -> i32 {
        self.priority
    }

    fn into_operation(self, s: &mut Scope<'_>) -> Option<Operation> {
        recipient(self.id, &self.phone, s).map(Operation::SendVoiceOtp)
    }
}
