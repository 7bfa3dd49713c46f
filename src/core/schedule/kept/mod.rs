//! A scheduled send's request as msgw keeps it until it leaves: its operation in a form
//! this module alone writes and reads (JSON, marked with the form's number). Reading it
//! back goes through the same validating constructors as a request at the border
//! (`Phone::parse`, `Text::parse`, ...), so a kept request that no longer validates is
//! refused as it leaves rather than sent. Only what the facts table calls schedulable
//! can be kept; every operation is named here, so a new one is decided here.

mod steps;
#[cfg(test)]
mod tests;
mod viber;

use serde::{Deserialize, Serialize};

use crate::core::domain::{
    ClientId, Error, HttpUrl, Lifetime, Operation, OtpCode, Phone, PipelineSend, Priority,
    RcsFallback, RcsSend, Recipient, Scope, SmsSend, TelegramOtp, Text, TextKind, ValueError,
    ViberSend, ViberStage, Violations, VoiceSend,
};

use steps::{KeptStep, KeptVoice, pipeline_steps};
use viber::{KeptSms, KeptViber, KeptViberStage};

/// The number of the form this version writes; a kept request of another form is not
/// read (an earlier version's requests are moved into this form first, see
/// `process/kept_upgrade.rs`).
pub const FORM: u32 = 1;

/// The request to keep for `op`, which must be schedulable, and the lane it leaves in.
pub fn encode(op: &Operation, lane: Priority) -> Result<Vec<u8>, Error> {
    let kept = Kept {
        form: FORM,
        op: KeptOp::of(op)?,
        lane: Some(lane),
    };
    serde_json::to_vec(&kept)
        .map_err(|e| Error::Internal(format!("a request to keep does not encode: {e}")))
}

/// The operation of a kept request, validated again, and its lane.
pub fn decode(bytes: &[u8]) -> Result<(Operation, Priority), Error> {
    let kept: Kept = serde_json::from_slice(bytes)
        .map_err(|e| Error::Internal(format!("a kept request does not read back: {e}")))?;
    if kept.form != FORM {
        return Err(Error::Internal(format!(
            "a kept request of form {}, this version reads form {FORM}",
            kept.form
        )));
    }
    let mut violations = Violations::new();
    let op = kept.op.into_operation(&mut violations.scope(""));
    // Kept before sends had lanes: normal, as every send was then.
    Ok((
        violations.finish(op)?,
        kept.lane.unwrap_or(Priority::Normal),
    ))
}

/// What is stored: the form's number and the operation.
#[derive(Serialize, Deserialize)]
struct Kept {
    form: u32,
    op: KeptOp,
    /// The lane it leaves in (absent in requests kept before lanes: normal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lane: Option<Priority>,
}

/// A schedulable operation, its values as plain text and numbers.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum KeptOp {
    Sms {
        id: u64,
        phone: u64,
        message: String,
        signature: String,
        lifetime: Option<u32>,
        short_link: bool,
        unsubscribe_link: bool,
    },
    Viber {
        id: u64,
        phone: u64,
        signature: String,
        content: KeptViber,
        lifetime: Option<u32>,
        short_link: bool,
        sms_fallback: Option<KeptSms>,
    },
    Rcs {
        id: u64,
        phone: u64,
        message: String,
        signature: String,
        image: String,
        button: String,
        link: String,
        lifetime: Option<u32>,
        short_link: bool,
        viber_fallback: Option<KeptViberStage>,
        sms_fallback: Option<KeptSms>,
    },
    TelegramOtp {
        id: u64,
        phone: u64,
        code: String,
        lifetime: Option<u32>,
    },
    Voice {
        id: u64,
        phone: u64,
        message: String,
        voice: KeptVoice,
        dtmf: bool,
    },
    Pipeline {
        id: u64,
        phone: u64,
        steps: Vec<KeptStep>,
    },
}

impl KeptOp {
    /// The kept form of `op`; an operation that is not schedulable is never kept.
    fn of(op: &Operation) -> Result<Self, Error> {
        if !op.schedulable() {
            return Err(not_kept(op));
        }
        let lifetime = |l: &Option<Lifetime>| l.map(Lifetime::seconds);
        Ok(match op {
            Operation::SendSms(o) => Self::Sms {
                id: o.to.id.get(),
                phone: o.to.phone.get(),
                message: own(&o.message),
                signature: own(&o.signature),
                lifetime: lifetime(&o.lifetime),
                short_link: o.short_link,
                unsubscribe_link: o.unsubscribe_link,
            },
            Operation::SendViber(o) => Self::Viber {
                id: o.to.id.get(),
                phone: o.to.phone.get(),
                signature: own(&o.signature),
                content: KeptViber::of(&o.content),
                lifetime: lifetime(&o.lifetime),
                short_link: o.short_link,
                sms_fallback: o.sms_fallback.as_ref().map(KeptSms::of),
            },
            Operation::SendRcs(o) => {
                let (viber_fallback, sms_fallback) = match &o.fallback {
                    RcsFallback::None => (None, None),
                    RcsFallback::Sms(sms) => (None, Some(KeptSms::of(sms))),
                    RcsFallback::ViberThenSms(viber, sms) => (
                        Some(KeptViberStage {
                            signature: own(&viber.signature),
                            content: KeptViber::of(&viber.content),
                        }),
                        Some(KeptSms::of(sms)),
                    ),
                };
                Self::Rcs {
                    id: o.to.id.get(),
                    phone: o.to.phone.get(),
                    message: own(&o.message),
                    signature: own(&o.signature),
                    image: o.image.as_str().to_owned(),
                    button: own(&o.button),
                    link: o.link.as_str().to_owned(),
                    lifetime: lifetime(&o.lifetime),
                    short_link: o.short_link,
                    viber_fallback,
                    sms_fallback,
                }
            }
            Operation::SendTelegramOtp(o) => Self::TelegramOtp {
                id: o.to.id.get(),
                phone: o.to.phone.get(),
                code: o.code.as_str().to_owned(),
                lifetime: lifetime(&o.lifetime),
            },
            Operation::SendVoice(o) => Self::Voice {
                id: o.to.id.get(),
                phone: o.to.phone.get(),
                message: own(&o.message),
                voice: KeptVoice::of(&o.voice),
                dtmf: o.dtmf,
            },
            Operation::SendPipeline(o) => Self::Pipeline {
                id: o.to.id.get(),
                phone: o.to.phone.get(),
                steps: o.steps.iter().map(KeptStep::of).collect(),
            },
            // Their facts say they are not schedulable (refused above).
            Operation::SendVoiceOtp(_)
            | Operation::GetMessageStatus(_)
            | Operation::GetBalance
            | Operation::ListSenders
            | Operation::LookupHlr(_)
            | Operation::CreateSmsTemplate { .. }
            | Operation::ListSmsTemplates
            | Operation::DeleteSmsTemplates(_)
            | Operation::CreateViberTemplate { .. }
            | Operation::ListViberTemplates
            | Operation::DeleteViberTemplates(_) => return Err(not_kept(op)),
        })
    }

    /// The operation again, every value checked as at the border.
    fn into_operation(self, s: &mut Scope<'_>) -> Option<Operation> {
        Some(match self {
            Self::Sms {
                id,
                phone,
                message,
                signature,
                lifetime,
                short_link,
                unsubscribe_link,
            } => {
                let to = recipient(s, id, phone);
                let message = text(s, "message", TextKind::Message, &message);
                let signature = text(s, "signature", TextKind::Signature, &signature);
                let lifetime = seconds(s, lifetime, Lifetime::sms);
                Operation::SendSms(SmsSend {
                    to: to?,
                    message: message?,
                    signature: signature?,
                    lifetime: lifetime?,
                    short_link,
                    unsubscribe_link,
                })
            }
            Self::Viber {
                id,
                phone,
                signature,
                content,
                lifetime,
                short_link,
                sms_fallback,
            } => {
                let to = recipient(s, id, phone);
                let signature = text(s, "signature", TextKind::Signature, &signature);
                let content = content.into_content(&mut s.child("content"));
                let lifetime = seconds(s, lifetime, Lifetime::at_least_minute);
                let sms_fallback = match sms_fallback {
                    None => Some(None),
                    Some(f) => f.into_fallback(&mut s.child("sms_fallback")).map(Some),
                };
                Operation::SendViber(ViberSend {
                    to: to?,
                    signature: signature?,
                    content: content?,
                    lifetime: lifetime?,
                    short_link,
                    sms_fallback: sms_fallback?,
                })
            }
            Self::Rcs {
                id,
                phone,
                message,
                signature,
                image,
                button,
                link,
                lifetime,
                short_link,
                viber_fallback,
                sms_fallback,
            } => {
                let to = recipient(s, id, phone);
                let message = text(s, "message", TextKind::Message, &message);
                let signature = text(s, "signature", TextKind::Signature, &signature);
                let image = s.check("image", HttpUrl::parse(&image));
                let button = text(s, "button", TextKind::Short, &button);
                let link = s.check("link", HttpUrl::parse(&link));
                let lifetime = seconds(s, lifetime, Lifetime::at_least_minute);
                let sms = sms_fallback.map(|f| f.into_fallback(&mut s.child("sms_fallback")));
                let fallback = match (viber_fallback, sms) {
                    (None, None) => Some(RcsFallback::None),
                    (None, Some(sms)) => sms.map(RcsFallback::Sms),
                    (Some(viber), Some(sms)) => {
                        let mut s = s.child("viber_fallback");
                        let signature =
                            text(&mut s, "signature", TextKind::Signature, &viber.signature);
                        let content = viber.content.into_content(&mut s.child("content"));
                        let stage = signature
                            .zip(content)
                            .map(|(signature, content)| ViberStage { signature, content });
                        stage
                            .zip(sms)
                            .map(|(stage, sms)| RcsFallback::ViberThenSms(stage, sms))
                    }
                    (Some(_), None) => {
                        s.add("sms_fallback", "required when viber_fallback is set");
                        None
                    }
                };
                Operation::SendRcs(RcsSend {
                    to: to?,
                    message: message?,
                    signature: signature?,
                    image: image?,
                    button: button?,
                    link: link?,
                    lifetime: lifetime?,
                    short_link,
                    fallback: fallback?,
                })
            }
            Self::TelegramOtp {
                id,
                phone,
                code,
                lifetime,
            } => {
                let to = recipient(s, id, phone);
                let code = s.check("code", OtpCode::parse(&code));
                let lifetime = seconds(s, lifetime, Lifetime::at_least_minute);
                Operation::SendTelegramOtp(TelegramOtp {
                    to: to?,
                    code: code?,
                    lifetime: lifetime?,
                })
            }
            Self::Voice {
                id,
                phone,
                message,
                voice,
                dtmf,
            } => {
                let to = recipient(s, id, phone);
                let message = text(s, "message", TextKind::Message, &message);
                let voice = voice.into_voice(&mut s.child("voice"));
                Operation::SendVoice(VoiceSend {
                    to: to?,
                    message: message?,
                    voice: voice?,
                    dtmf,
                })
            }
            Self::Pipeline { id, phone, steps } => {
                let to = recipient(s, id, phone);
                let steps = pipeline_steps(s, steps);
                Operation::SendPipeline(PipelineSend {
                    to: to?,
                    steps: steps?,
                })
            }
        })
    }
}

fn recipient(s: &mut Scope<'_>, id: u64, phone: u64) -> Option<Recipient> {
    let id = s.check("id", ClientId::new(id));
    let phone = s.check("phone", Phone::parse(&phone.to_string()));
    Some(Recipient {
        id: id?,
        phone: phone?,
    })
}

pub(super) fn text(s: &mut Scope<'_>, field: &str, kind: TextKind, value: &str) -> Option<Text> {
    s.check(field, Text::parse(value, kind))
}

/// A lifetime of whole seconds within `bounds`; `Some(None)` when unset.
fn seconds(
    s: &mut Scope<'_>,
    value: Option<u32>,
    bounds: fn(u64) -> Result<Lifetime, ValueError>,
) -> Option<Option<Lifetime>> {
    match value {
        None => Some(None),
        Some(secs) => s.check("lifetime", bounds(u64::from(secs))).map(Some),
    }
}

pub(super) fn own(text: &Text) -> String {
    text.as_str().to_owned()
}

fn not_kept(op: &Operation) -> Error {
    Error::Internal(format!(
        "{} cannot be scheduled: msgw keeps no request of it",
        op.rpc_name()
    ))
}
