//! Delivery channels and their names on the wire.

/// A channel a message can be delivered over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Channel {
    Sms,
    Viber,
    Rcs,
    Telegram,
    Voice,
    Whatsapp,
}

impl Channel {
    /// Every channel a `pipeline` may list, by its wire name.
    pub const PIPELINE: [Channel; 6] = [
        Channel::Voice,
        Channel::Telegram,
        Channel::Viber,
        Channel::Rcs,
        Channel::Sms,
        Channel::Whatsapp,
    ];

    /// Wire name, as in `type` of status results and webhooks.
    pub fn name(self) -> &'static str {
        match self {
            Channel::Sms => "sms",
            Channel::Viber => "viber",
            Channel::Rcs => "rcs",
            Channel::Telegram => "telegram",
            Channel::Voice => "voice",
            Channel::Whatsapp => "whatsapp",
        }
    }

    /// The channel of a pipeline entry, if the name is known.
    pub fn from_pipeline_name(name: &str) -> Option<Self> {
        Self::PIPELINE.into_iter().find(|c| c.name() == name)
    }
}
