//! A validated StartVerification, and the one send operation it makes with a code:
//! one channel with its own operation, several with one `pipeline`, a lone voice
//! channel with `call/otp` (the gateway's code).

use std::time::Duration;

use super::code::Code;
use crate::core::domain::{
    Channel, ClientId, Operation, OtpCode, Phone, PipelineSend, PipelineStep, Recipient, SmsSend,
    TelegramOtp, Text, TextKind, ValueError, ViberContent, ViberKind, ViberSend, Voice,
};

/// Where a message template puts the code.
pub const PLACEHOLDER: &str = "{code}";

/// The message when the request names none.
pub const DEFAULT_MESSAGE: &str = "Your verification code is {code}";

/// Digits of a code when the request names none, and the bounds.
pub const DEFAULT_DIGITS: usize = 6;
/// See [`DEFAULT_DIGITS`].
pub const DIGITS: std::ops::RangeInclusive<usize> = 4..=8;

/// Time to live when the request names none, and the bounds.
pub const DEFAULT_TTL: Duration = Duration::from_secs(600);
/// See [`DEFAULT_TTL`].
pub const TTL: std::ops::RangeInclusive<Duration> =
    Duration::from_secs(60)..=Duration::from_secs(86_400);

/// A message template with `{code}` in it, that stays a valid message with any code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template(String);

impl Template {
    /// Checks a template (empty: the default).
    pub fn parse(input: &str) -> Result<Self, ValueError> {
        let input = if input.trim().is_empty() {
            DEFAULT_MESSAGE
        } else {
            input
        };
        if !input.contains(PLACEHOLDER) {
            return Err(ValueError(format!(
                "must contain {PLACEHOLDER}, where the code goes"
            )));
        }
        // With the longest code in, it must still be a message the gateway takes.
        Text::parse(&input.replace(PLACEHOLDER, "00000000"), TextKind::Message)?;
        Ok(Self(input.to_owned()))
    }

    /// The message with `code` in it (a message the gateway takes: it was checked with
    /// the longest code in).
    fn with(&self, code: &Code) -> Result<Text, ValueError> {
        Text::parse(
            &self.0.replace(PLACEHOLDER, code.as_str()),
            TextKind::Message,
        )
    }
}

/// A StartVerification, every field checked.
#[derive(Debug, Clone, PartialEq)]
pub struct StartVerification {
    /// The send's client id.
    pub id: ClientId,
    /// The number.
    pub phone: Phone,
    /// Channels in order, at least one, no repeats.
    pub channels: Vec<Channel>,
    /// Sender name; present when a channel that needs one is listed.
    pub signature: Option<Text>,
    /// The message template.
    pub message: Template,
    /// Digits of a new code.
    pub digits: usize,
    /// Time to live of a new verification.
    pub ttl: Duration,
    /// The voice of a voice step in a pipeline; present when one is.
    pub voice: Option<Voice>,
    /// The end user behind the call, for the fraud guard's key limits.
    pub rate_limit_keys: super::guard::RateLimitKeys,
}

impl StartVerification {
    /// The request as its send id stays tied to (see [`super::Codes::request_mac`]):
    /// every field but the id and the rate-limit keys (they describe the end user, not
    /// the message), each field's parts `\0`-separated, fields `\x1f`-separated.
    pub fn canonical(&self) -> Vec<u8> {
        let channels: Vec<&str> = self.channels.iter().map(|c| c.as_str()).collect();
        let voice = self.voice.as_ref().map_or_else(String::new, |v| {
            format!(
                "{:?}\0{}\0{}",
                v.gender,
                v.language.as_str(),
                v.name.as_str()
            )
        });
        [
            self.phone.get().to_string(),
            channels.join(","),
            self.signature
                .as_ref()
                .map_or("", |s| s.as_str())
                .to_owned(),
            self.message.0.clone(),
            self.digits.to_string(),
            self.ttl.as_millis().to_string(),
            voice,
        ]
        .join("\x1f")
        .into_bytes()
    }

    /// Whether the send is a `call/otp` call, whose code the gateway picks.
    pub fn gateway_picks_code(&self) -> bool {
        self.channels == [Channel::Voice]
    }

    /// The send of `code` (`None` for a `call/otp` call, which brings its own).
    pub fn operation(&self, code: Option<&Code>) -> Result<Operation, crate::core::domain::Error> {
        let to = Recipient {
            id: self.id,
            phone: self.phone,
        };
        let missing = |what: &str| {
            crate::core::domain::Error::Internal(format!("a verification send without its {what}"))
        };
        if self.gateway_picks_code() {
            return Ok(Operation::SendVoiceOtp(to));
        }
        let code = code.ok_or_else(|| missing("code"))?;
        let signature = || self.signature.clone().ok_or_else(|| missing("signature"));
        let message = self.message.with(code).map_err(|e| {
            crate::core::domain::Error::Internal(format!("a verification message: {e}"))
        })?;
        let otp = || OtpCode::parse(code.as_str()).map_err(|_| missing("code of 4 to 8 digits"));
        Ok(match self.channels[..] {
            [Channel::Sms] => Operation::SendSms(SmsSend {
                to,
                message,
                signature: signature()?,
                lifetime: None,
                short_link: false,
                unsubscribe_link: false,
            }),
            [Channel::Viber] => Operation::SendViber(ViberSend {
                to,
                signature: signature()?,
                content: ViberContent::Text { message },
                lifetime: None,
                short_link: false,
                sms_fallback: None,
            }),
            [Channel::Telegram] => Operation::SendTelegramOtp(TelegramOtp {
                to,
                code: otp()?,
                lifetime: None,
            }),
            // RCS's own operation needs an image, a button and a link, and WhatsApp has
            // none: a pipeline of one channel carries just the text.
            _ => Operation::SendPipeline(PipelineSend {
                to,
                steps: self
                    .channels
                    .iter()
                    .map(|channel| {
                        Ok(match channel {
                            Channel::Sms => PipelineStep::Sms {
                                message: message.clone(),
                                signature: signature()?,
                            },
                            Channel::Telegram => PipelineStep::Telegram { code: otp()? },
                            Channel::Viber => PipelineStep::Viber {
                                message: message.clone(),
                                signature: signature()?,
                                kind: ViberKind::Text,
                            },
                            Channel::Voice => PipelineStep::Voice(
                                self.voice.clone().ok_or_else(|| missing("voice"))?,
                            ),
                            Channel::Whatsapp => PipelineStep::Whatsapp {
                                message: message.clone(),
                                signature: signature()?,
                            },
                            Channel::Rcs => PipelineStep::Rcs {
                                message: message.clone(),
                                signature: signature()?,
                            },
                        })
                    })
                    .collect::<Result<_, crate::core::domain::Error>>()?,
            }),
        })
    }
}

/// Whether a channel's text needs a sender name.
pub fn needs_signature(channel: Channel) -> bool {
    matches!(
        channel,
        Channel::Sms | Channel::Viber | Channel::Rcs | Channel::Whatsapp
    )
}
