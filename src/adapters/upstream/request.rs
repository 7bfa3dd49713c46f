//! Request envelope DTOs: exact gateway field names and JSON types. `id` and `phone`
//! are JSON numbers, lifetimes seconds, booleans present only when set.

use serde::Serialize;

use crate::core::domain::{
    Gender, Lifetime, Operation, PipelineStep, RcsFallback, Recipient, Slide, SmsFallback,
    TemplateSelector, Text, ViberContent, ViberKind, Voice,
};

#[derive(Serialize)]
pub(super) struct Envelope<'a> {
    pub auth: &'a str,
    pub data: Vec<Item<'a>>,
}

/// One operation object of `data`, flattened from typed parts so every variant
/// spells a field the same way.
#[derive(Serialize, Default)]
pub(super) struct Item<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    phone: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    hook: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    short_link: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sms_message: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sms_signature: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sms_lifetime: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    unsubscribe_link: Option<bool>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    viber: Option<ViberFields<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    viber_lifetime: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rcs_message: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rcs_signature: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rcs_image: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rcs_button: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rcs_link: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rcs_lifetime: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    telegram_lifetime: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    voice: Option<VoiceDto<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dtmf: Option<bool>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pipeline: Option<PipelineDto<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    template: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    signature: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none", rename = "id")]
    template_id: Option<TemplateId<'a>>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum TemplateId<'a> {
    /// `template/delete` takes the id as a JSON string.
    Text(&'a str),
    /// `template/viber/delete` takes it as a JSON integer.
    Number(u64),
}

#[derive(Serialize, Default)]
struct ViberFields<'a> {
    viber_signature: &'a str,
    viber_type: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    viber_message: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    viber_image: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    viber_link: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    viber_button: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    viber_carousel: Option<Vec<SlideDto<'a>>>,
}

#[derive(Serialize)]
struct SlideDto<'a> {
    caption: &'a str,
    image: &'a str,
    url: &'a str,
    button: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    button2: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    url2: Option<&'a str>,
}

#[derive(Serialize)]
struct VoiceDto<'a> {
    gender: &'static str,
    language: &'a str,
    name: &'a str,
}

#[derive(Serialize, Default)]
struct PipelineDto<'a> {
    pipeline: Vec<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sms: Option<TextSettings<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    telegram: Option<TextSettings<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    viber: Option<PipelineViberDto<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    voice: Option<VoiceDto<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    whatsapp: Option<TextSettings<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rcs: Option<TextSettings<'a>>,
}

#[derive(Serialize)]
struct TextSettings<'a> {
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    signature: Option<&'a str>,
}

#[derive(Serialize)]
struct PipelineViberDto<'a> {
    message: &'a str,
    signature: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

/// The gateway's `type` of an operation, derived from what the request carries.
pub fn type_name(op: &Operation) -> &'static str {
    match op {
        Operation::SendSms(_) => "sms",
        Operation::SendViber(v) if v.sms_fallback.is_some() => "viber+sms",
        Operation::SendViber(_) => "viber",
        Operation::SendRcs(r) => match r.fallback {
            RcsFallback::None => "rcs",
            RcsFallback::Sms(_) => "rcs+sms",
            RcsFallback::ViberThenSms(..) => "rcs+viber+sms",
        },
        Operation::SendTelegramOtp(_) => "telegram",
        Operation::SendVoice(_) => "voice",
        Operation::SendVoiceOtp(_) => "call/otp",
        Operation::SendPipeline(_) => "pipeline",
        Operation::GetMessageStatus(_) => "status",
        Operation::GetBalance => "balance",
        Operation::ListSenders => "sender",
        Operation::LookupHlr(_) => "hlr",
        Operation::CreateSmsTemplate { .. } => "template/create",
        Operation::ListSmsTemplates => "template/list",
        Operation::DeleteSmsTemplates(_) => "template/delete",
        Operation::CreateViberTemplate { .. } => "template/viber/create",
        Operation::ListViberTemplates => "template/viber/list",
        Operation::DeleteViberTemplates(_) => "template/viber/delete",
    }
}

fn viber_type(kind: ViberKind) -> &'static str {
    match kind {
        ViberKind::Text => "text",
        ViberKind::Image => "image",
        ViberKind::TextLink => "text+link",
        ViberKind::TextImageLink => "text+image+link",
        ViberKind::Carousel => "carousel",
    }
}

fn gender(g: Gender) -> &'static str {
    match g {
        Gender::Male => "male",
        Gender::Female => "female",
    }
}

fn flag(set: bool) -> Option<bool> {
    set.then_some(true)
}

fn seconds(lifetime: Option<Lifetime>) -> Option<u32> {
    lifetime.map(Lifetime::seconds)
}

fn text(t: &Option<Text>) -> Option<&str> {
    t.as_ref().map(Text::as_str)
}

impl<'a> Item<'a> {
    /// The JSON object of one operation; `hook` is the status callback for sends.
    pub(super) fn new(op: &'a Operation, hook: Option<&'a str>) -> Self {
        let kind = type_name(op);
        match op {
            Operation::SendSms(s) => Self {
                sms_message: Some(s.message.as_str()),
                sms_signature: Some(s.signature.as_str()),
                sms_lifetime: seconds(s.lifetime),
                unsubscribe_link: flag(s.unsubscribe_link),
                short_link: flag(s.short_link),
                ..Self::send(kind, &s.to, hook)
            },
            Operation::SendViber(v) => Self {
                viber: Some(ViberFields::new(&v.signature, &v.content)),
                viber_lifetime: seconds(v.lifetime),
                short_link: flag(v.short_link),
                ..Self::send(kind, &v.to, hook).with_sms(v.sms_fallback.as_ref())
            },
            Operation::SendRcs(r) => {
                let (viber, sms) = match &r.fallback {
                    RcsFallback::None => (None, None),
                    RcsFallback::Sms(sms) => (None, Some(sms)),
                    RcsFallback::ViberThenSms(v, sms) => {
                        (Some(ViberFields::new(&v.signature, &v.content)), Some(sms))
                    }
                };
                Self {
                    rcs_message: Some(r.message.as_str()),
                    rcs_signature: Some(r.signature.as_str()),
                    rcs_image: Some(r.image.as_str()),
                    rcs_button: Some(r.button.as_str()),
                    rcs_link: Some(r.link.as_str()),
                    rcs_lifetime: seconds(r.lifetime),
                    short_link: flag(r.short_link),
                    viber,
                    ..Self::send(kind, &r.to, hook).with_sms(sms)
                }
            }
            Operation::SendTelegramOtp(t) => Self {
                message: Some(t.code.as_str()),
                telegram_lifetime: seconds(t.lifetime),
                ..Self::send(kind, &t.to, hook)
            },
            Operation::SendVoice(v) => Self {
                message: Some(v.message.as_str()),
                voice: Some(VoiceDto::new(&v.voice)),
                dtmf: flag(v.dtmf),
                ..Self::send(kind, &v.to, hook)
            },
            Operation::SendVoiceOtp(to) | Operation::LookupHlr(to) => Self::send(kind, to, None),
            Operation::SendPipeline(p) => Self {
                pipeline: Some(PipelineDto::new(&p.steps)),
                // The gateway does not store a pipeline hook; statuses reach the
                // account-level notification address instead.
                ..Self::send(kind, &p.to, None)
            },
            Operation::GetMessageStatus(id) => Self {
                id: Some(id.get()),
                ..Self::bare(kind)
            },
            Operation::GetBalance
            | Operation::ListSenders
            | Operation::ListSmsTemplates
            | Operation::ListViberTemplates => Self::bare(kind),
            Operation::CreateSmsTemplate { text: t, name } => Self {
                template: Some(t.as_str()),
                name: text(name),
                ..Self::bare(kind)
            },
            Operation::CreateViberTemplate { text: t, signature } => Self {
                template: Some(t.as_str()),
                signature: text(signature),
                ..Self::bare(kind)
            },
            Operation::DeleteSmsTemplates(TemplateSelector { id, text: t }) => Self {
                template_id: id.as_ref().map(|id| TemplateId::Text(id.as_str())),
                template: text(t),
                ..Self::bare(kind)
            },
            Operation::DeleteViberTemplates(TemplateSelector { id, text: t }) => Self {
                template_id: id.map(TemplateId::Number),
                template: text(t),
                ..Self::bare(kind)
            },
        }
    }

    fn bare(kind: &'static str) -> Self {
        Self {
            kind,
            ..Self::default()
        }
    }

    fn send(kind: &'static str, to: &Recipient, hook: Option<&'a str>) -> Self {
        Self {
            id: Some(to.id.get()),
            phone: Some(to.phone.get()),
            hook,
            ..Self::bare(kind)
        }
    }

    fn with_sms(self, sms: Option<&'a SmsFallback>) -> Self {
        Self {
            sms_message: sms.map(|s| s.message.as_str()),
            sms_signature: sms.map(|s| s.signature.as_str()),
            ..self
        }
    }
}

impl<'a> ViberFields<'a> {
    fn new(signature: &'a Text, content: &'a ViberContent) -> Self {
        let base = Self {
            viber_signature: signature.as_str(),
            viber_type: viber_type(content.kind()),
            ..Self::default()
        };
        match content {
            ViberContent::Text { message } => Self {
                viber_message: Some(message.as_str()),
                ..base
            },
            ViberContent::Image { image } => Self {
                viber_image: Some(image.as_str()),
                ..base
            },
            ViberContent::TextLink {
                message,
                link,
                button,
            } => Self {
                viber_message: Some(message.as_str()),
                viber_link: Some(link.as_str()),
                viber_button: Some(button.as_str()),
                ..base
            },
            ViberContent::TextImageLink {
                message,
                image,
                link,
                button,
            } => Self {
                viber_message: Some(message.as_str()),
                viber_image: Some(image.as_str()),
                viber_link: Some(link.as_str()),
                viber_button: Some(button.as_str()),
                ..base
            },
            ViberContent::Carousel { message, slides } => Self {
                viber_message: Some(message.as_str()),
                viber_carousel: Some(slides.iter().map(SlideDto::new).collect()),
                ..base
            },
        }
    }
}

impl<'a> SlideDto<'a> {
    fn new(s: &'a Slide) -> Self {
        Self {
            caption: s.caption.as_str(),
            image: s.image.as_str(),
            url: s.url.as_str(),
            button: s.button.as_str(),
            button2: s.second.as_ref().map(|(b, _)| b.as_str()),
            url2: s.second.as_ref().map(|(_, u)| u.as_str()),
        }
    }
}

impl<'a> VoiceDto<'a> {
    fn new(v: &'a Voice) -> Self {
        Self {
            gender: gender(v.gender),
            language: v.language.as_str(),
            name: v.name.as_str(),
        }
    }
}

impl<'a> PipelineDto<'a> {
    fn new(steps: &'a [PipelineStep]) -> Self {
        let mut dto = Self {
            pipeline: steps.iter().map(|s| s.channel().as_str()).collect(),
            ..Self::default()
        };
        for step in steps {
            match step {
                PipelineStep::Sms { message, signature } => {
                    dto.sms = Some(TextSettings::new(message, Some(signature)));
                }
                PipelineStep::Telegram { code } => {
                    dto.telegram = Some(TextSettings {
                        message: code.as_str(),
                        signature: None,
                    });
                }
                PipelineStep::Viber {
                    message,
                    signature,
                    kind,
                } => {
                    dto.viber = Some(PipelineViberDto {
                        message: message.as_str(),
                        signature: signature.as_str(),
                        kind: viber_type(*kind),
                    });
                }
                PipelineStep::Voice(voice) => dto.voice = Some(VoiceDto::new(voice)),
                PipelineStep::Whatsapp { message, signature } => {
                    dto.whatsapp = Some(TextSettings::new(message, Some(signature)));
                }
                PipelineStep::Rcs { message, signature } => {
                    dto.rcs = Some(TextSettings::new(message, Some(signature)));
                }
            }
        }
        dto
    }
}

impl<'a> TextSettings<'a> {
    fn new(message: &'a Text, signature: Option<&'a Text>) -> Self {
        Self {
            message: message.as_str(),
            signature: signature.map(Text::as_str),
        }
    }
}
