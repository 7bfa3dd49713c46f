//! The Viber and SMS parts of a kept request (content, slides, a Viber stage, an SMS
//! fallback), written and read back.

use serde::{Deserialize, Serialize};

use super::{own, text};
use crate::core::domain::{
    CAROUSEL_SLIDES, HttpUrl, Scope, Slide, SmsFallback, TextKind, ViberContent,
};

#[derive(Serialize, Deserialize)]
pub(super) struct KeptSms {
    message: String,
    signature: String,
}

impl KeptSms {
    pub(super) fn of(f: &SmsFallback) -> Self {
        Self {
            message: own(&f.message),
            signature: own(&f.signature),
        }
    }

    pub(super) fn into_fallback(self, s: &mut Scope<'_>) -> Option<SmsFallback> {
        let message = text(s, "message", TextKind::Message, &self.message);
        let signature = text(s, "signature", TextKind::Signature, &self.signature);
        Some(SmsFallback {
            message: message?,
            signature: signature?,
        })
    }
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum KeptViber {
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

impl KeptViber {
    pub(super) fn of(content: &ViberContent) -> Self {
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

    pub(super) fn into_content(self, s: &mut Scope<'_>) -> Option<ViberContent> {
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

#[derive(Serialize, Deserialize)]
pub(super) struct KeptSlide {
    caption: String,
    image: String,
    url: String,
    button: String,
    second: Option<(String, String)>,
}

impl KeptSlide {
    pub(super) fn into_slide(self, s: &mut Scope<'_>) -> Option<Slide> {
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

#[derive(Serialize, Deserialize)]
pub(super) struct KeptViberStage {
    pub(super) signature: String,
    pub(super) content: KeptViber,
}
