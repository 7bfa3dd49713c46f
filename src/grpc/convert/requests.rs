//! Proto requests → validated domain operations. Every rule of the spec is checked
//! here (through the domain's parsers) and every violation is reported with its
//! proto field path.

use prost_types::Duration;

use crate::domain::{
    CAROUSEL_SLIDES, ClientId, Gender, HttpUrl, Lifetime, Operation, OtpCode, Phone, PipelineSend,
    PipelineStep, RcsFallback, RcsSend, Recipient, Scope, Slide, SmsFallback, SmsSend, TelegramOtp,
    TemplateSelector, Text, TextKind, ValueError, ViberContent, ViberKind, ViberSend, ViberStage,
    Voice, VoiceSend,
};
use crate::proto;

/// Converts a request of one RPC (or one batch item) into its operation.
pub trait IntoOperation {
    /// Checks every field, recording violations in `s`; `None` if any field failed.
    fn into_operation(self, s: &mut Scope<'_>) -> Option<Operation>;
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

fn slide(s: &mut Scope<'_>, slide: proto::ViberCarouselSlide) -> Option<Slide> {
    let caption = text(s, "caption", TextKind::Short, &slide.caption);
    let image = url(s, "image_url", &slide.image_url);
    let link = url(s, "url", &slide.url);
    let button = text(s, "button", TextKind::Short, &slide.button);
    let second = match (slide.button2.is_empty(), slide.url2.is_empty()) {
        (true, true) => Some(None),
        (false, false) => {
            let b = text(s, "button2", TextKind::Short, &slide.button2);
            let u = url(s, "url2", &slide.url2);
            b.zip(u).map(Some)
        }
        (true, false) => {
            s.add(
                "button2",
                "required when url2 is set (the second button needs both)",
            );
            None
        }
        (false, true) => {
            s.add(
                "url2",
                "required when button2 is set (the second button needs both)",
            );
            None
        }
    };
    Some(Slide {
        caption: caption?,
        image: image?,
        url: link?,
        button: button?,
        second: second?,
    })
}

/// The five Viber kinds, shared by SendViber and the Viber stage of SendRcs.
pub(super) enum ViberOneof {
    Text(proto::ViberText),
    Image(proto::ViberImage),
    TextLink(proto::ViberTextLink),
    TextImageLink(proto::ViberTextImageLink),
    Carousel(proto::ViberCarousel),
}

fn viber_content(s: &mut Scope<'_>, content: Option<ViberOneof>) -> Option<ViberContent> {
    let Some(content) = content else {
        s.add(
            "content",
            "required: one of text, image, text_link, text_image_link, carousel",
        );
        return None;
    };
    match content {
        ViberOneof::Text(c) => {
            let mut s = s.child("text");
            Some(ViberContent::Text {
                message: text(&mut s, "message", TextKind::Message, &c.message)?,
            })
        }
        ViberOneof::Image(c) => {
            let mut s = s.child("image");
            Some(ViberContent::Image {
                image: url(&mut s, "image_url", &c.image_url)?,
            })
        }
        ViberOneof::TextLink(c) => {
            let mut s = s.child("text_link");
            let message = text(&mut s, "message", TextKind::Message, &c.message);
            let link = url(&mut s, "link_url", &c.link_url);
            let button = text(&mut s, "button", TextKind::Short, &c.button);
            Some(ViberContent::TextLink {
                message: message?,
                link: link?,
                button: button?,
            })
        }
        ViberOneof::TextImageLink(c) => {
            let mut s = s.child("text_image_link");
            let message = text(&mut s, "message", TextKind::Message, &c.message);
            let image = url(&mut s, "image_url", &c.image_url);
            let link = url(&mut s, "link_url", &c.link_url);
            let button = text(&mut s, "button", TextKind::Short, &c.button);
            Some(ViberContent::TextImageLink {
                message: message?,
                image: image?,
                link: link?,
                button: button?,
            })
        }
        ViberOneof::Carousel(c) => {
            let mut s = s.child("carousel");
            let message = text(&mut s, "message", TextKind::Message, &c.message);
            if !CAROUSEL_SLIDES.contains(&c.slides.len()) {
                s.add(
                    "slides",
                    format!(
                        "must have {} to {} slides, has {}",
                        CAROUSEL_SLIDES.start(),
                        CAROUSEL_SLIDES.end(),
                        c.slides.len()
                    ),
                );
            }
            let slides: Vec<Option<Slide>> = c
                .slides
                .into_iter()
                .enumerate()
                .map(|(i, sl)| slide(&mut s.child(&format!("slides[{i}]")), sl))
                .collect();
            let slides = slides.into_iter().collect::<Option<Vec<_>>>();
            let slides = slides.filter(|v| CAROUSEL_SLIDES.contains(&v.len()));
            Some(ViberContent::Carousel {
                message: message?,
                slides: slides?,
            })
        }
    }
}

impl From<proto::send_viber_request::Content> for ViberOneof {
    fn from(c: proto::send_viber_request::Content) -> Self {
        use proto::send_viber_request::Content as C;
        match c {
            C::Text(v) => Self::Text(v),
            C::Image(v) => Self::Image(v),
            C::TextLink(v) => Self::TextLink(v),
            C::TextImageLink(v) => Self::TextImageLink(v),
            C::Carousel(v) => Self::Carousel(v),
        }
    }
}

impl From<proto::viber_fallback::Content> for ViberOneof {
    fn from(c: proto::viber_fallback::Content) -> Self {
        use proto::viber_fallback::Content as C;
        match c {
            C::Text(v) => Self::Text(v),
            C::Image(v) => Self::Image(v),
            C::TextLink(v) => Self::TextLink(v),
            C::TextImageLink(v) => Self::TextImageLink(v),
            C::Carousel(v) => Self::Carousel(v),
        }
    }
}

fn voice(s: &mut Scope<'_>, field: &str, v: Option<proto::VoiceProfile>) -> Option<Voice> {
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
    fn into_operation(self, s: &mut Scope<'_>) -> Option<Operation> {
        let to = recipient(self.id, &self.phone, s);
        let message = text(s, "message", TextKind::Message, &self.message);
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

impl IntoOperation for proto::SendViberRequest {
    fn into_operation(self, s: &mut Scope<'_>) -> Option<Operation> {
        let to = recipient(self.id, &self.phone, s);
        let signature = text(s, "signature", TextKind::Signature, &self.signature);
        let content = viber_content(s, self.content.map(ViberOneof::from));
        let lifetime = lifetime(s, self.lifetime, Lifetime::at_least_minute);
        let sms_fallback = match self.sms_fallback {
            None => Some(None),
            some => sms_fallback(s, "sms_fallback", some).map(Some),
        };
        Some(Operation::SendViber(ViberSend {
            to: to?,
            signature: signature?,
            content: content?,
            lifetime: lifetime?,
            short_link: self.short_link,
            sms_fallback: sms_fallback?,
        }))
    }
}

impl IntoOperation for proto::SendRcsRequest {
    fn into_operation(self, s: &mut Scope<'_>) -> Option<Operation> {
        let to = recipient(self.id, &self.phone, s);
        let message = text(s, "message", TextKind::Message, &self.message);
        let signature = text(s, "signature", TextKind::Signature, &self.signature);
        let image = url(s, "image_url", &self.image_url);
        let button = text(s, "button", TextKind::Short, &self.button);
        let link = url(s, "link_url", &self.link_url);
        let lifetime = lifetime(s, self.lifetime, Lifetime::at_least_minute);
        let fallback = match (self.viber_fallback, self.sms_fallback) {
            (None, None) => Some(RcsFallback::None),
            (None, sms) => sms_fallback(s, "sms_fallback", sms).map(RcsFallback::Sms),
            (Some(viber), sms) => {
                let stage = {
                    let mut s = s.child("viber_fallback");
                    let signature =
                        text(&mut s, "signature", TextKind::Signature, &viber.signature);
                    let content = viber_content(&mut s, viber.content.map(ViberOneof::from));
                    signature.zip(content)
                };
                if sms.is_none() {
                    s.add(
                        "sms_fallback",
                        "required when viber_fallback is set (the gateway's chain is RCS, Viber, then SMS)",
                    );
                    None
                } else {
                    let sms = sms_fallback(s, "sms_fallback", sms);
                    stage.zip(sms).map(|((signature, content), sms)| {
                        RcsFallback::ViberThenSms(ViberStage { signature, content }, sms)
                    })
                }
            }
        };
        Some(Operation::SendRcs(RcsSend {
            to: to?,
            message: message?,
            signature: signature?,
            image: image?,
            button: button?,
            link: link?,
            lifetime: lifetime?,
            short_link: self.short_link,
            fallback: fallback?,
        }))
    }
}

impl IntoOperation for proto::SendTelegramOtpRequest {
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
    fn into_operation(self, s: &mut Scope<'_>) -> Option<Operation> {
        recipient(self.id, &self.phone, s).map(Operation::SendVoiceOtp)
    }
}

impl IntoOperation for proto::SendPipelineRequest {
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

impl IntoOperation for proto::GetMessageStatusRequest {
    /// The query itself; waiting (`wait_for_final`) is the RPC's, which clears the flag
    /// before this, so a flag still set here is a Batch item's.
    fn into_operation(self, s: &mut Scope<'_>) -> Option<Operation> {
        if self.wait_for_final {
            s.add(
                "wait_for_final",
                "not allowed in a Batch item: call GetMessageStatus to wait",
            );
        }
        s.check("id", ClientId::new(self.id))
            .map(Operation::GetMessageStatus)
    }
}

impl IntoOperation for proto::GetBalanceRequest {
    fn into_operation(self, _: &mut Scope<'_>) -> Option<Operation> {
        Some(Operation::GetBalance)
    }
}

impl IntoOperation for proto::ListSendersRequest {
    fn into_operation(self, _: &mut Scope<'_>) -> Option<Operation> {
        Some(Operation::ListSenders)
    }
}

impl IntoOperation for proto::LookupHlrRequest {
    fn into_operation(self, s: &mut Scope<'_>) -> Option<Operation> {
        recipient(self.id, &self.phone, s).map(Operation::LookupHlr)
    }
}

impl IntoOperation for proto::CreateSmsTemplateRequest {
    fn into_operation(self, s: &mut Scope<'_>) -> Option<Operation> {
        let body = text(s, "text", TextKind::Message, &self.text);
        let name = s.check("name", Text::optional(&self.name, TextKind::Short));
        Some(Operation::CreateSmsTemplate {
            text: body?,
            name: name?,
        })
    }
}

impl IntoOperation for proto::ListSmsTemplatesRequest {
    fn into_operation(self, _: &mut Scope<'_>) -> Option<Operation> {
        Some(Operation::ListSmsTemplates)
    }
}

impl IntoOperation for proto::DeleteSmsTemplatesRequest {
    fn into_operation(self, s: &mut Scope<'_>) -> Option<Operation> {
        let id = s.check("id", Text::optional(&self.id, TextKind::Short));
        let body = s.check("text", Text::optional(&self.text, TextKind::Message));
        selector(s, id?, body?).map(Operation::DeleteSmsTemplates)
    }
}

impl IntoOperation for proto::CreateViberTemplateRequest {
    fn into_operation(self, s: &mut Scope<'_>) -> Option<Operation> {
        let body = text(s, "text", TextKind::Message, &self.text);
        let signature = s.check(
            "signature",
            Text::optional(&self.signature, TextKind::Signature),
        );
        Some(Operation::CreateViberTemplate {
            text: body?,
            signature: signature?,
        })
    }
}

impl IntoOperation for proto::ListViberTemplatesRequest {
    fn into_operation(self, _: &mut Scope<'_>) -> Option<Operation> {
        Some(Operation::ListViberTemplates)
    }
}

impl IntoOperation for proto::DeleteViberTemplatesRequest {
    fn into_operation(self, s: &mut Scope<'_>) -> Option<Operation> {
        let body = s.check("text", Text::optional(&self.text, TextKind::Message));
        selector(s, (self.id != 0).then_some(self.id), body?).map(Operation::DeleteViberTemplates)
    }
}

fn selector<Id>(
    s: &mut Scope<'_>,
    id: Option<Id>,
    text: Option<Text>,
) -> Option<TemplateSelector<Id>> {
    if id.is_none() && text.is_none() {
        s.add(
            "id",
            "required: an id or a text (or both) selects the templates to delete",
        );
        return None;
    }
    Some(TemplateSelector { id, text })
}
