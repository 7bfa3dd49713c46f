//! Validated gateway operations. Constructing one means every rule of
//! docs/gateway.md#validation-rules holds.

use super::{ClientId, HttpUrl, Lifetime, OtpCode, Phone, Text};

/// Who receives a message, and the client's id for it.
#[derive(Debug, Clone, PartialEq)]
pub struct Recipient {
    /// The client's message id.
    pub id: ClientId,
    /// The recipient's number.
    pub phone: Phone,
}

/// An SMS.
#[derive(Debug, Clone, PartialEq)]
pub struct SmsSend {
    /// Id and number.
    pub to: Recipient,
    /// Message text.
    pub message: Text,
    /// Registered sender name.
    pub signature: Text,
    /// Delivery lifetime (3600..=259200 s).
    pub lifetime: Option<Lifetime>,
    /// Shorten and track links.
    pub short_link: bool,
    /// Add an unsubscribe link.
    pub unsubscribe_link: bool,
}

/// SMS text and sender used when an earlier channel fails.
#[derive(Debug, Clone, PartialEq)]
pub struct SmsFallback {
    /// SMS text.
    pub message: Text,
    /// Registered sender name.
    pub signature: Text,
}

/// The five kinds of Viber message, each with exactly the fields its kind needs.
#[derive(Debug, Clone, PartialEq)]
pub enum ViberContent {
    /// Text only.
    Text { message: Text },
    /// Image only.
    Image { image: HttpUrl },
    /// Text and a button.
    TextLink {
        message: Text,
        link: HttpUrl,
        button: Text,
    },
    /// Text, image and a button.
    TextImageLink {
        message: Text,
        image: HttpUrl,
        link: HttpUrl,
        button: Text,
    },
    /// Text and 2 to 5 slides.
    Carousel { message: Text, slides: Vec<Slide> },
}

/// Bounds of a carousel.
pub const CAROUSEL_SLIDES: std::ops::RangeInclusive<usize> = 2..=5;

impl ViberContent {
    /// The kind of this content.
    pub fn kind(&self) -> ViberKind {
        match self {
            Self::Text { .. } => ViberKind::Text,
            Self::Image { .. } => ViberKind::Image,
            Self::TextLink { .. } => ViberKind::TextLink,
            Self::TextImageLink { .. } => ViberKind::TextImageLink,
            Self::Carousel { .. } => ViberKind::Carousel,
        }
    }
}

/// A Viber message kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViberKind {
    /// `text`
    Text,
    /// `image`
    Image,
    /// `text+link`
    TextLink,
    /// `text+image+link`
    TextImageLink,
    /// `carousel`
    Carousel,
}

/// One carousel slide.
#[derive(Debug, Clone, PartialEq)]
pub struct Slide {
    /// Caption.
    pub caption: Text,
    /// Image link.
    pub image: HttpUrl,
    /// Button link.
    pub url: HttpUrl,
    /// Button caption.
    pub button: Text,
    /// The optional second button: caption and link, always together.
    pub second: Option<(Text, HttpUrl)>,
}

/// A Viber message, with an optional SMS fallback (`viber+sms`).
#[derive(Debug, Clone, PartialEq)]
pub struct ViberSend {
    /// Id and number.
    pub to: Recipient,
    /// Registered Viber sender name.
    pub signature: Text,
    /// The message.
    pub content: ViberContent,
    /// Delivery lifetime (>= 60 s).
    pub lifetime: Option<Lifetime>,
    /// Shorten and track links.
    pub short_link: bool,
    /// SMS sent when Viber is not delivered.
    pub sms_fallback: Option<SmsFallback>,
}

/// The Viber stage of an RCS → Viber → SMS chain.
#[derive(Debug, Clone, PartialEq)]
pub struct ViberStage {
    /// Registered Viber sender name.
    pub signature: Text,
    /// The message.
    pub content: ViberContent,
}

/// What follows RCS when it fails.
#[derive(Debug, Clone, PartialEq)]
pub enum RcsFallback {
    /// Nothing (`rcs`).
    None,
    /// SMS (`rcs+sms`).
    Sms(SmsFallback),
    /// Viber, then SMS (`rcs+viber+sms`).
    ViberThenSms(ViberStage, SmsFallback),
}

/// An RCS message.
#[derive(Debug, Clone, PartialEq)]
pub struct RcsSend {
    /// Id and number.
    pub to: Recipient,
    /// Message text.
    pub message: Text,
    /// Registered RCS sender name.
    pub signature: Text,
    /// Image link.
    pub image: HttpUrl,
    /// Button caption.
    pub button: Text,
    /// Button link.
    pub link: HttpUrl,
    /// Delivery lifetime (>= 60 s).
    pub lifetime: Option<Lifetime>,
    /// Shorten and track links.
    pub short_link: bool,
    /// The fallback chain.
    pub fallback: RcsFallback,
}

/// A Telegram one-time password.
#[derive(Debug, Clone, PartialEq)]
pub struct TelegramOtp {
    /// Id and number.
    pub to: Recipient,
    /// The password.
    pub code: OtpCode,
    /// Delivery lifetime (>= 60 s).
    pub lifetime: Option<Lifetime>,
}

/// Text-to-speech voice gender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gender {
    /// `male`
    Male,
    /// `female`
    Female,
}

/// A text-to-speech voice.
#[derive(Debug, Clone, PartialEq)]
pub struct Voice {
    /// Gender.
    pub gender: Gender,
    /// Language code.
    pub language: Text,
    /// Voice model name.
    pub name: Text,
}

/// A text-to-speech call.
#[derive(Debug, Clone, PartialEq)]
pub struct VoiceSend {
    /// Id and number.
    pub to: Recipient,
    /// Text read to the callee.
    pub message: Text,
    /// The voice.
    pub voice: Voice,
    /// Collect one digit from the callee.
    pub dtmf: bool,
}

/// One channel of a pipeline, with its settings.
#[derive(Debug, Clone, PartialEq)]
pub enum PipelineStep {
    /// SMS.
    Sms { message: Text, signature: Text },
    /// Telegram one-time password.
    Telegram { code: OtpCode },
    /// Viber.
    Viber {
        message: Text,
        signature: Text,
        kind: ViberKind,
    },
    /// Voice call.
    Voice(Voice),
    /// WhatsApp.
    Whatsapp { message: Text, signature: Text },
    /// RCS.
    Rcs { message: Text, signature: Text },
}

impl PipelineStep {
    /// The channel of this step.
    pub fn channel(&self) -> super::Channel {
        use super::Channel;
        match self {
            Self::Sms { .. } => Channel::Sms,
            Self::Telegram { .. } => Channel::Telegram,
            Self::Viber { .. } => Channel::Viber,
            Self::Voice(_) => Channel::Voice,
            Self::Whatsapp { .. } => Channel::Whatsapp,
            Self::Rcs { .. } => Channel::Rcs,
        }
    }
}

/// A multi-channel send: non-empty, each channel at most once, tried in order.
#[derive(Debug, Clone, PartialEq)]
pub struct PipelineSend {
    /// Id and number.
    pub to: Recipient,
    /// Channels in order, with their settings.
    pub steps: Vec<PipelineStep>,
}

/// Which templates to delete: by id, by exact text, or both.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateSelector<Id> {
    /// Template id.
    pub id: Option<Id>,
    /// Exact template text.
    pub text: Option<Text>,
}

/// Every operation of the gateway, validated.
#[derive(Debug, Clone, PartialEq)]
pub enum Operation {
    /// `sms`
    SendSms(SmsSend),
    /// `viber` / `viber+sms`
    SendViber(ViberSend),
    /// `rcs` / `rcs+sms` / `rcs+viber+sms`
    SendRcs(RcsSend),
    /// `telegram`
    SendTelegramOtp(TelegramOtp),
    /// `voice`
    SendVoice(VoiceSend),
    /// `call/otp`
    SendVoiceOtp(Recipient),
    /// `pipeline`
    SendPipeline(PipelineSend),
    /// `status`
    GetMessageStatus(ClientId),
    /// `balance`
    GetBalance,
    /// `sender`
    ListSenders,
    /// `hlr`
    LookupHlr(Recipient),
    /// `template/create`
    CreateSmsTemplate { text: Text, name: Option<Text> },
    /// `template/list`
    ListSmsTemplates,
    /// `template/delete`
    DeleteSmsTemplates(TemplateSelector<Text>),
    /// `template/viber/create`
    CreateViberTemplate { text: Text, signature: Option<Text> },
    /// `template/viber/list`
    ListViberTemplates,
    /// `template/viber/delete`
    DeleteViberTemplates(TemplateSelector<u64>),
}
