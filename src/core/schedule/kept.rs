//! A scheduled send's request as msgw keeps it until it leaves: its operation in a form
//! this module alone writes and reads (JSON, marked with the form's number). Reading it
//! back goes through the same validating constructors as a request at the border
//! (`Phone::parse`, `Text::parse`, ...), so a kept request that no longer validates is
//! refused as it leaves rather than sent. Only what the facts table calls schedulable
//! can be kept; every operation is named here, so a new one is decided here.

use serde::{Deserialize, Serialize};

use crate::core::domain::{
    CAROUSEL_SLIDES, ClientId, Error, Gender, HttpUrl, Lifetime, Operation, OtpCode, Phone,
    PipelineSend, PipelineStep, RcsFallback, RcsSend, Recipient, Scope, Slide, SmsFallback,
    SmsSend, TelegramOtp, Text, TextKind, ValueError, ViberContent, ViberKind, ViberSend,
    ViberStage, Violations, Voice, VoiceSend,
};

/// The number of the form this version writes; a kept request of another form is not
/// read (an earlier version's requests are moved into this form first, see
/// `process/kept_upgrade.rs`).
pub const FORM: u32 = 1;

/// The request to keep for `op`, which must be schedulable.
pub fn encode(op: &Operation) -> Result<Vec<u8>, Error> {
    let kept = Kept {
        form: FORM,
        op: KeptOp::of(op)?,
    };
    serde_json::to_vec(&kept)
        .map_err(|e| Error::Internal(format!("a request to keep does not encode: {e}")))
}

/// The operation of a kept request, validated again.
pub fn decode(bytes: &[u8]) -> Result<Operation, Error> {
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
    violations.finish(op)
}

#[derive(Serialize, Deserialize)]
struct Kept {
    form: u32,
    op: KeptOp,
}

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

#[derive(Serialize, Deserialize)]
struct KeptSms {
    message: String,
    signature: String,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum KeptViber {
    Text {
        message: String,
    },
    Image {
        image: String,
    },
    TextLink {
        message: String,
        link: String,
        button: String,
    },
    TextImageLink {
        message: String,
        image: String,
        link: String,
        button: String,
    },
    Carousel {
        message: String,
        slides: Vec<KeptSlide>,
    },
}

#[derive(Serialize, Deserialize)]
struct KeptSlide {
    caption: String,
    image: String,
    url: String,
    button: String,
    second: Option<(String, String)>,
}

#[derive(Serialize, Deserialize)]
struct KeptViberStage {
    signature: String,
    content: KeptViber,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum KeptGender {
    Male,
    Female,
}

#[derive(Serialize, Deserialize)]
struct KeptVoice {
    gender: KeptGender,
    language: String,
    name: String,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum KeptViberKind {
    Text,
    Image,
    TextLink,
    TextImageLink,
    Carousel,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum KeptStep {
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

impl KeptSms {
    fn of(f: &SmsFallback) -> Self {
        Self {
            message: own(&f.message),
            signature: own(&f.signature),
        }
    }

    fn into_fallback(self, s: &mut Scope<'_>) -> Option<SmsFallback> {
        let message = text(s, "message", TextKind::Message, &self.message);
        let signature = text(s, "signature", TextKind::Signature, &self.signature);
        Some(SmsFallback {
            message: message?,
            signature: signature?,
        })
    }
}

impl KeptViber {
    fn of(content: &ViberContent) -> Self {
        match content {
            ViberContent::Text { message } => Self::Text {
                message: own(message),
            },
            ViberContent::Image { image } => Self::Image {
                image: image.as_str().to_owned(),
            },
            ViberContent::TextLink {
                message,
                link,
                button,
            } => Self::TextLink {
                message: own(message),
                link: link.as_str().to_owned(),
                button: own(button),
            },
            ViberContent::TextImageLink {
                message,
                image,
                link,
                button,
            } => Self::TextImageLink {
                message: own(message),
                image: image.as_str().to_owned(),
                link: link.as_str().to_owned(),
                button: own(button),
            },
            ViberContent::Carousel { message, slides } => Self::Carousel {
                message: own(message),
                slides: slides
                    .iter()
                    .map(|slide| KeptSlide {
                        caption: own(&slide.caption),
                        image: slide.image.as_str().to_owned(),
                        url: slide.url.as_str().to_owned(),
                        button: own(&slide.button),
                        second: slide
                            .second
                            .as_ref()
                            .map(|(button, url)| (own(button), url.as_str().to_owned())),
                    })
                    .collect(),
            },
        }
    }

    fn into_content(self, s: &mut Scope<'_>) -> Option<ViberContent> {
        Some(match self {
            Self::Text { message } => ViberContent::Text {
                message: text(s, "message", TextKind::Message, &message)?,
            },
            Self::Image { image } => ViberContent::Image {
                image: s.check("image", HttpUrl::parse(&image))?,
            },
            Self::TextLink {
                message,
                link,
                button,
            } => {
                let message = text(s, "message", TextKind::Message, &message);
                let link = s.check("link", HttpUrl::parse(&link));
                let button = text(s, "button", TextKind::Short, &button);
                ViberContent::TextLink {
                    message: message?,
                    link: link?,
                    button: button?,
                }
            }
            Self::TextImageLink {
                message,
                image,
                link,
                button,
            } => {
                let message = text(s, "message", TextKind::Message, &message);
                let image = s.check("image", HttpUrl::parse(&image));
                let link = s.check("link", HttpUrl::parse(&link));
                let button = text(s, "button", TextKind::Short, &button);
                ViberContent::TextImageLink {
                    message: message?,
                    image: image?,
                    link: link?,
                    button: button?,
                }
            }
            Self::Carousel { message, slides } => {
                let message = text(s, "message", TextKind::Message, &message);
                if !CAROUSEL_SLIDES.contains(&slides.len()) {
                    s.add("slides", "must have 2 to 5 slides");
                }
                let count = slides.len();
                let slides: Vec<Slide> = slides
                    .into_iter()
                    .enumerate()
                    .filter_map(|(i, slide)| {
                        slide.into_slide(&mut s.child(&format!("slides[{i}]")))
                    })
                    .collect();
                ViberContent::Carousel {
                    message: message?,
                    slides: (slides.len() == count && CAROUSEL_SLIDES.contains(&count))
                        .then_some(slides)?,
                }
            }
        })
    }
}

impl KeptSlide {
    fn into_slide(self, s: &mut Scope<'_>) -> Option<Slide> {
        let caption = text(s, "caption", TextKind::Short, &self.caption);
        let image = s.check("image", HttpUrl::parse(&self.image));
        let url = s.check("url", HttpUrl::parse(&self.url));
        let button = text(s, "button", TextKind::Short, &self.button);
        let second = match self.second {
            None => Some(None),
            Some((button, url)) => {
                let button = text(s, "button2", TextKind::Short, &button);
                let url = s.check("url2", HttpUrl::parse(&url));
                button.zip(url).map(Some)
            }
        };
        Some(Slide {
            caption: caption?,
            image: image?,
            url: url?,
            button: button?,
            second: second?,
        })
    }
}

impl KeptVoice {
    fn of(voice: &Voice) -> Self {
        Self {
            gender: match voice.gender {
                Gender::Male => KeptGender::Male,
                Gender::Female => KeptGender::Female,
            },
            language: own(&voice.language),
            name: own(&voice.name),
        }
    }

    fn into_voice(self, s: &mut Scope<'_>) -> Option<Voice> {
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

impl KeptViberKind {
    fn of(kind: ViberKind) -> Self {
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

impl KeptStep {
    fn of(step: &PipelineStep) -> Self {
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

    fn into_step(self, s: &mut Scope<'_>) -> Option<PipelineStep> {
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
fn pipeline_steps(s: &mut Scope<'_>, kept: Vec<KeptStep>) -> Option<Vec<PipelineStep>> {
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

fn recipient(s: &mut Scope<'_>, id: u64, phone: u64) -> Option<Recipient> {
    let id = s.check("id", ClientId::new(id));
    let phone = s.check("phone", Phone::parse(&phone.to_string()));
    Some(Recipient {
        id: id?,
        phone: phone?,
    })
}

fn text(s: &mut Scope<'_>, field: &str, kind: TextKind, value: &str) -> Option<Text> {
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

fn own(text: &Text) -> String {
    text.as_str().to_owned()
}

fn not_kept(op: &Operation) -> Error {
    Error::Internal(format!(
        "{} cannot be scheduled: msgw keeps no request of it",
        op.rpc_name()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Text {
        Text::parse(s, TextKind::Message).unwrap()
    }

    fn url(s: &str) -> HttpUrl {
        HttpUrl::parse(s).unwrap()
    }

    fn to(id: u64) -> Recipient {
        Recipient {
            id: ClientId::new(id).unwrap(),
            phone: Phone::parse("+380971234567").unwrap(),
        }
    }

    fn voice() -> Voice {
        Voice {
            gender: Gender::Female,
            language: t("uk-UA"),
            name: t("uk-UA-Standard-A"),
        }
    }

    fn carousel() -> ViberContent {
        let slide = |second| Slide {
            caption: t("caption"),
            image: url("https://example.org/a.png"),
            url: url("https://example.org/a"),
            button: t("Buy"),
            second,
        };
        ViberContent::Carousel {
            message: t("pick one"),
            slides: vec![
                slide(None),
                slide(Some((t("More"), url("https://example.org/b")))),
            ],
        }
    }

    fn schedulable() -> Vec<Operation> {
        let sms = SmsFallback {
            message: t("fallback ✓"),
            signature: t("Shop"),
        };
        vec![
            Operation::SendSms(SmsSend {
                to: to(1),
                message: t("hello, ünïcode"),
                signature: t("Shop"),
                lifetime: Some(Lifetime::sms(3600).unwrap()),
                short_link: true,
                unsubscribe_link: false,
            }),
            Operation::SendViber(ViberSend {
                to: to(2),
                signature: t("Shop"),
                content: carousel(),
                lifetime: None,
                short_link: false,
                sms_fallback: Some(sms.clone()),
            }),
            Operation::SendViber(ViberSend {
                to: to(3),
                signature: t("Shop"),
                content: ViberContent::TextImageLink {
                    message: t("m"),
                    image: url("http://example.org/i.png"),
                    link: url("https://example.org/l?q=1"),
                    button: t("Go"),
                },
                lifetime: Some(Lifetime::at_least_minute(60).unwrap()),
                short_link: true,
                sms_fallback: None,
            }),
            Operation::SendRcs(RcsSend {
                to: to(4),
                message: t("rcs"),
                signature: t("Shop"),
                image: url("https://example.org/i.png"),
                button: t("Go"),
                link: url("https://example.org/"),
                lifetime: None,
                short_link: false,
                fallback: RcsFallback::ViberThenSms(
                    ViberStage {
                        signature: t("Shop"),
                        content: ViberContent::Image {
                            image: url("https://example.org/v.png"),
                        },
                    },
                    sms.clone(),
                ),
            }),
            Operation::SendRcs(RcsSend {
                to: to(5),
                message: t("rcs"),
                signature: t("Shop"),
                image: url("https://example.org/i.png"),
                button: t("Go"),
                link: url("https://example.org/"),
                lifetime: None,
                short_link: false,
                fallback: RcsFallback::Sms(sms),
            }),
            Operation::SendTelegramOtp(TelegramOtp {
                to: to(6),
                code: OtpCode::parse("123456").unwrap(),
                lifetime: None,
            }),
            Operation::SendVoice(VoiceSend {
                to: to(7),
                message: t("your code is 1 2 3"),
                voice: voice(),
                dtmf: true,
            }),
            Operation::SendPipeline(PipelineSend {
                to: to(8),
                steps: vec![
                    PipelineStep::Viber {
                        message: t("v"),
                        signature: t("Shop"),
                        kind: ViberKind::Text,
                    },
                    PipelineStep::Telegram {
                        code: OtpCode::parse("1234").unwrap(),
                    },
                    PipelineStep::Voice(voice()),
                    PipelineStep::Whatsapp {
                        message: t("w"),
                        signature: t("Shop"),
                    },
                    PipelineStep::Rcs {
                        message: t("r"),
                        signature: t("Shop"),
                    },
                    PipelineStep::Sms {
                        message: t("s"),
                        signature: t("Shop"),
                    },
                ],
            }),
        ]
    }

    #[test]
    fn every_schedulable_operation_reads_back_as_it_was_kept() {
        for op in schedulable() {
            assert!(op.schedulable(), "{op:?}");
            let kept = encode(&op).unwrap();
            assert_eq!(decode(&kept).unwrap(), op);
        }
    }

    #[test]
    fn what_cannot_be_scheduled_is_never_kept() {
        for op in [Operation::SendVoiceOtp(to(9)), Operation::GetBalance] {
            assert!(!op.schedulable());
            assert!(matches!(encode(&op), Err(Error::Internal(_))), "{op:?}");
        }
    }

    #[test]
    fn a_kept_request_is_validated_again_and_another_form_is_refused() {
        let op = &schedulable()[0];
        let kept = String::from_utf8(encode(op).unwrap()).unwrap();
        let bad_phone = kept.replace("380971234567", "123");
        let Err(Error::InvalidArgument(v)) = decode(bad_phone.as_bytes()) else {
            panic!("a bad phone read back");
        };
        assert_eq!(v[0].field, "phone");
        let other_form = kept.replace("\"form\":1", "\"form\":2");
        assert!(matches!(
            decode(other_form.as_bytes()),
            Err(Error::Internal(_))
        ));
        // An earlier version's form (prost bytes) is not read here.
        assert!(matches!(
            decode(&[0x0a, 0x02, 0x08, 0x01]),
            Err(Error::Internal(_))
        ));
    }
}
