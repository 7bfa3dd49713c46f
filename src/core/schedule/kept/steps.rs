//! The voice and pipeline parts of a kept request (a voice, a pipeline's steps),
//! written and read back.

use serde::{Deserialize, Serialize};

use super::{own, text};
use crate::core::domain::{Gender, OtpCode, PipelineStep, Scope, Text, TextKind, ViberKind, Voice};

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum KeptGender {
    Male,
    Female,
}

#[derive(Serialize, Deserialize)]
pub(super) struct KeptVoice {
    gender: KeptGender,
    language: String,
    name: String,
}

impl KeptVoice {
    pub(super) fn of(voice: &Voice) -> Self {
        Self {
            gender: match voice.gender {
                Gender::Male => KeptGender::Male,
                Gender::Female => KeptGender::Female,
            },
            language: own(&voice.language),
            name: own(&voice.name),
        }
    }

    pub(super) fn into_voice(self, s: &mut Scope<'_>) -> Option<Voice> {
        let language = text(s, "language", TextKind::Short, &self.language);
        let name = text(s, "name", TextKind::Short, &self.name);
        Some(Voice {
            gender: match self.gender {
                KeptGender::Male => Gender::Male,
                KeptGender::Female => Gender::Female,
            },
            language: language?,
            name: name?,
        })
    }
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum KeptViberKind {
    Text,
    Image,
    TextLink,
    TextImageLink,
    Carousel,
}

impl KeptViberKind {
    pub(super) fn of(kind: ViberKind) -> Self {
        match kind {
            ViberKind::Text => Self::Text,
            ViberKind::Image => Self::Image,
            ViberKind::TextLink => Self::TextLink,
            ViberKind::TextImageLink => Self::TextImageLink,
            ViberKind::Carousel => Self::Carousel,
        }
    }

    fn kind(self) -> ViberKind {
        match self {
            Self::Text => ViberKind::Text,
            Self::Image => ViberKind::Image,
            Self::TextLink => ViberKind::TextLink,
            Self::TextImageLink => ViberKind::TextImageLink,
            Self::Carousel => ViberKind::Carousel,
        }
    }
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum KeptStep {
    Sms {
        message: String,
        signature: String,
    },
    Telegram {
        code: String,
    },
    Viber {
        message: String,
        signature: String,
        kind: KeptViberKind,
    },
    Voice(KeptVoice),
    Whatsapp {
        message: String,
        signature: String,
    },
    Rcs {
        message: String,
        signature: String,
    },
}

impl KeptStep {
    pub(super) fn of(step: &PipelineStep) -> Self {
        match step {
            PipelineStep::Sms { message, signature } => Self::Sms {
                message: own(message),
                signature: own(signature),
            },
            PipelineStep::Telegram { code } => Self::Telegram {
                code: code.as_str().to_owned(),
            },
            PipelineStep::Viber {
                message,
                signature,
                kind,
            } => Self::Viber {
                message: own(message),
                signature: own(signature),
                kind: KeptViberKind::of(*kind),
            },
            PipelineStep::Voice(voice) => Self::Voice(KeptVoice::of(voice)),
            PipelineStep::Whatsapp { message, signature } => Self::Whatsapp {
                message: own(message),
                signature: own(signature),
            },
            PipelineStep::Rcs { message, signature } => Self::Rcs {
                message: own(message),
                signature: own(signature),
            },
        }
    }

    pub(super) fn into_step(self, s: &mut Scope<'_>) -> Option<PipelineStep> {
        Some(match self {
            Self::Sms { message, signature } => {
                let (message, signature) = texts(s, &message, &signature)?;
                PipelineStep::Sms { message, signature }
            }
            Self::Telegram { code } => PipelineStep::Telegram {
                code: s.check("code", OtpCode::parse(&code))?,
            },
            Self::Viber {
                message,
                signature,
                kind,
            } => {
                let (message, signature) = texts(s, &message, &signature)?;
                PipelineStep::Viber {
                    message,
                    signature,
                    kind: kind.kind(),
                }
            }
            Self::Voice(voice) => PipelineStep::Voice(voice.into_voice(s)?),
            Self::Whatsapp { message, signature } => {
                let (message, signature) = texts(s, &message, &signature)?;
                PipelineStep::Whatsapp { message, signature }
            }
            Self::Rcs { message, signature } => {
                let (message, signature) = texts(s, &message, &signature)?;
                PipelineStep::Rcs { message, signature }
            }
        })
    }
}

/// A step's message and sender name.
fn texts(s: &mut Scope<'_>, message: &str, signature: &str) -> Option<(Text, Text)> {
    let message = text(s, "message", TextKind::Message, message);
    let signature = text(s, "signature", TextKind::Signature, signature);
    message.zip(signature)
}

/// A pipeline's steps: at least one, each channel at most once.
pub(super) fn pipeline_steps(s: &mut Scope<'_>, kept: Vec<KeptStep>) -> Option<Vec<PipelineStep>> {
    if kept.is_empty() {
        s.add("steps", "required: at least one channel");
        return None;
    }
    let count = kept.len();
    let mut steps: Vec<PipelineStep> = Vec::with_capacity(count);
    for (i, step) in kept.into_iter().enumerate() {
        let mut s = s.child(&format!("steps[{i}]"));
        let Some(step) = step.into_step(&mut s) else {
            continue;
        };
        if steps.iter().any(|seen| seen.channel() == step.channel()) {
            s.add("", "its channel is listed twice; channels may not repeat");
            continue;
        }
        steps.push(step);
    }
    (steps.len() == count).then_some(steps)
}
