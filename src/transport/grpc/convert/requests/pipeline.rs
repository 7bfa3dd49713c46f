//! SendPipeline: the channels of the gateway's multi-channel pipeline, each with its
//! settings.

use super::{IntoOperation, recipient, text, voice};
use crate::core::domain::OpKind;
use crate::core::domain::{
    Operation, OtpCode, PipelineSend, PipelineStep, Scope, TextKind, ViberKind,
};
use crate::transport::proto;

impl IntoOperation for proto::SendPipelineRequest {
    const KIND: OpKind = OpKind::SendPipeline;

    fn asked_priority(&self) -> i32 {
        self.priority
    }

    fn into_operation(self, s: &mut Scope<'_>) -> Option<Operation> {
        let to = recipient(self.id, &self.phone, s);
        let steps = pipeline_steps(s, self);
        Some(Operation::SendPipeline(PipelineSend {
            to: to?,
            steps: steps?,
        }))
    }
}

fn pipeline_steps(
    s: &mut Scope<'_>,
    mut r: proto::SendPipelineRequest,
) -> Option<Vec<PipelineStep>> {
    use proto::Channel as C;
    if r.channels.is_empty() {
        s.add("channels", "required: at least one channel");
        return None;
    }
    let mut steps = Vec::with_capacity(r.channels.len());
    let mut seen = Vec::with_capacity(r.channels.len());
    let mut ok = true;
    for (i, raw) in r.channels.iter().enumerate() {
        let field = format!("channels[{i}]");
        let channel = match C::try_from(*raw) {
            Ok(C::Unspecified) | Err(_) => {
                s.add(
                    &field,
                    "must be a channel (CHANNEL_SMS, CHANNEL_VIBER, ...)",
                );
                ok = false;
                continue;
            }
            Ok(c) => c,
        };
        if seen.contains(&channel) {
            s.add(
                &field,
                format!(
                    "{} is listed twice; channels may not repeat",
                    channel.as_str_name()
                ),
            );
            ok = false;
            continue;
        }
        seen.push(channel);
        let step = match channel {
            C::Sms => settings(s, "sms", r.sms.take()).and_then(|(mut s, v)| {
                let message = text(&mut s, "message", TextKind::Message, &v.message);
                let signature = text(&mut s, "signature", TextKind::Signature, &v.signature);
                Some(PipelineStep::Sms {
                    message: message?,
                    signature: signature?,
                })
            }),
            C::Telegram => settings(s, "telegram", r.telegram.take()).and_then(|(mut s, v)| {
                Some(PipelineStep::Telegram {
                    code: s.check("code", OtpCode::parse(&v.code))?,
                })
            }),
            C::Viber => settings(s, "viber", r.viber.take()).and_then(|(mut s, v)| {
                let message = text(&mut s, "message", TextKind::Message, &v.message);
                let signature = text(&mut s, "signature", TextKind::Signature, &v.signature);
                let kind = viber_kind(v.kind);
                if kind.is_none() {
                    s.add("kind", "required: a VIBER_KIND_* value");
                }
                Some(PipelineStep::Viber {
                    message: message?,
                    signature: signature?,
                    kind: kind?,
                })
            }),
            C::Voice => settings(s, "voice", r.voice.take())
                .and_then(|(mut s, v)| voice(&mut s, "voice", v.voice).map(PipelineStep::Voice)),
            C::Whatsapp => settings(s, "whatsapp", r.whatsapp.take()).and_then(|(mut s, v)| {
                let message = text(&mut s, "message", TextKind::Message, &v.message);
                let signature = text(&mut s, "signature", TextKind::Signature, &v.signature);
                Some(PipelineStep::Whatsapp {
                    message: message?,
                    signature: signature?,
                })
            }),
            C::Rcs => settings(s, "rcs", r.rcs.take()).and_then(|(mut s, v)| {
                let message = text(&mut s, "message", TextKind::Message, &v.message);
                let signature = text(&mut s, "signature", TextKind::Signature, &v.signature);
                Some(PipelineStep::Rcs {
                    message: message?,
                    signature: signature?,
                })
            }),
            C::Unspecified => None,
        };
        match step {
            Some(step) => steps.push(step),
            None => ok = false,
        }
    }
    // Settings left over belong to channels that are not listed: most likely a mistake.
    let unlisted = [
        ("sms", r.sms.is_some()),
        ("telegram", r.telegram.is_some()),
        ("viber", r.viber.is_some()),
        ("voice", r.voice.is_some()),
        ("whatsapp", r.whatsapp.is_some()),
        ("rcs", r.rcs.is_some()),
    ];
    for (field, present) in unlisted {
        if present {
            s.add(field, "set, but its channel is not listed in channels");
            ok = false;
        }
    }
    ok.then_some(steps)
}

/// The settings message of a listed pipeline channel, which must be present.
fn settings<'s, 'v, T>(
    s: &'s mut Scope<'v>,
    field: &str,
    value: Option<T>,
) -> Option<(Scope<'s>, T)> {
    match value {
        Some(v) => Some((s.child(field), v)),
        None => {
            s.add(field, "required: its channel is listed in channels");
            None
        }
    }
}

fn viber_kind(raw: i32) -> Option<ViberKind> {
    match proto::ViberKind::try_from(raw).ok()? {
        proto::ViberKind::Unspecified => None,
        proto::ViberKind::Text => Some(ViberKind::Text),
        proto::ViberKind::Image => Some(ViberKind::Image),
        proto::ViberKind::TextLink => Some(ViberKind::TextLink),
        proto::ViberKind::TextImageLink => Some(ViberKind::TextImageLink),
        proto::ViberKind::Carousel => Some(ViberKind::Carousel),
    }
}
