//! SendViber and SendRcs: the five Viber kinds, carousels, and the RCS chain with its
//! Viber and SMS stages.

use super::{IntoOperation, lifetime, recipient, sms_fallback, text, url};
use crate::core::domain::OpKind;
use crate::core::domain::{
    CAROUSEL_SLIDES, Lifetime, Operation, RcsFallback, RcsSend, Scope, Slide, TextKind,
    ViberContent, ViberSend, ViberStage,
};
use crate::transport::proto;

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

pub(super) fn viber_content(
    s: &mut Scope<'_>,
    content: Option<ViberOneof>,
) -> Option<ViberContent> {
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

impl IntoOperation for proto::SendViberRequest {
    const KIND: OpKind = OpKind::SendViber;

    fn asked_priority(&self) -> i32 {
        self.priority
    }

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
    const KIND: OpKind = OpKind::SendRcs;

    fn asked_priority(&self) -> i32 {
        self.priority
    }

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
