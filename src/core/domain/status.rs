//! Channels and message statuses, as the gateway names them.

/// A delivery channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Channel {
    /// `sms`
    Sms,
    /// `viber`
    Viber,
    /// `rcs`
    Rcs,
    /// `telegram`
    Telegram,
    /// `voice`
    Voice,
    /// `whatsapp`
    Whatsapp,
}

impl Channel {
    /// Every channel.
    pub const ALL: [Channel; 6] = [
        Self::Sms,
        Self::Viber,
        Self::Rcs,
        Self::Telegram,
        Self::Voice,
        Self::Whatsapp,
    ];

    /// How long the gateway keeps trying a message on this channel when the send names
    /// no lifetime (the gateway's defaults, docs/gateway.md#limits; voice calls have none
    /// and end within the hour).
    pub fn default_lifetime(self) -> std::time::Duration {
        std::time::Duration::from_secs(match self {
            Self::Viber => 86_400,
            Self::Voice => 3_600,
            Self::Sms | Self::Rcs | Self::Telegram | Self::Whatsapp => 172_800,
        })
    }

    /// The gateway's name of the channel.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sms => "sms",
            Self::Viber => "viber",
            Self::Rcs => "rcs",
            Self::Telegram => "telegram",
            Self::Voice => "voice",
            Self::Whatsapp => "whatsapp",
        }
    }

    /// The channel of a gateway name, if msgw knows it.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == name)
    }
}

/// A message status of the gateway's complete list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    Accepted,
    Deleted,
    Delivered,
    Expired,
    Filtered,
    InvalidDestinationAddress,
    InvalidSourceAddress,
    NoRoute,
    PartiallyDelivered,
    Queued,
    Read,
    Rejected,
    Replied,
    Routing,
    SimFull,
    Undeliverable,
    Unknown,
    /// msgw's own: kept to be sent at its time (not final).
    Scheduled,
    /// msgw's own: a scheduled message cancelled before it left (final).
    Canceled,
}

impl Status {
    /// Every status, in the gateway's alphabetical order.
    pub const ALL: [Status; 17] = [
        Self::Accepted,
        Self::Deleted,
        Self::Delivered,
        Self::Expired,
        Self::Filtered,
        Self::InvalidDestinationAddress,
        Self::InvalidSourceAddress,
        Self::NoRoute,
        Self::PartiallyDelivered,
        Self::Queued,
        Self::Read,
        Self::Rejected,
        Self::Replied,
        Self::Routing,
        Self::SimFull,
        Self::Undeliverable,
        Self::Unknown,
    ];

    /// msgw's own statuses, which the gateway never reports.
    pub const OWN: [Status; 2] = [Self::Scheduled, Self::Canceled];

    /// The gateway's spelling (some contain spaces).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Accepted => "ACCEPTED",
            Self::Deleted => "DELETED",
            Self::Delivered => "DELIVERED",
            Self::Expired => "EXPIRED",
            Self::Filtered => "FILTERED",
            Self::InvalidDestinationAddress => "INVALID DESTINATION ADDRESS",
            Self::InvalidSourceAddress => "INVALID SOURCE ADDRESS",
            Self::NoRoute => "NO ROUTE",
            Self::PartiallyDelivered => "PARTIALLY DELIVERED",
            Self::Queued => "QUEUED",
            Self::Read => "READ",
            Self::Rejected => "REJECTED",
            Self::Replied => "REPLIED",
            Self::Routing => "ROUTING",
            Self::SimFull => "SIM FULL",
            Self::Undeliverable => "UNDELIVERABLE",
            Self::Unknown => "UNKNOWN",
            Self::Scheduled => "SCHEDULED",
            Self::Canceled => "CANCELED",
        }
    }

    /// The status of a gateway string; `None` for a value msgw does not know.
    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .chain(Self::OWN)
            .find(|s| s.as_str() == raw)
    }

    /// Whether the message can still change.
    pub fn is_final(self) -> bool {
        !matches!(
            self,
            Self::Accepted | Self::Queued | Self::Routing | Self::Scheduled
        )
    }

    /// Whether this is a successful final state.
    pub fn is_success(self) -> bool {
        matches!(
            self,
            Self::Delivered | Self::Read | Self::Replied | Self::PartiallyDelivered
        )
    }
}

/// A status as reported: the known value if any, and the verbatim string always.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportedStatus {
    /// The known status, `None` when the gateway used a value msgw does not know.
    pub known: Option<Status>,
    /// The gateway's value verbatim.
    pub raw: String,
}

impl ReportedStatus {
    /// Keeps `raw` and recognizes it if it is a known value.
    pub fn new(raw: String) -> Self {
        Self {
            known: Status::parse(&raw),
            raw,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip_and_classify() {
        for s in Status::ALL {
            assert_eq!(Status::parse(s.as_str()), Some(s));
        }
        let non_final: Vec<_> = Status::ALL.into_iter().filter(|s| !s.is_final()).collect();
        assert_eq!(
            non_final,
            [Status::Accepted, Status::Queued, Status::Routing]
        );
        let ok: Vec<_> = Status::ALL.into_iter().filter(|s| s.is_success()).collect();
        assert_eq!(
            ok,
            [
                Status::Delivered,
                Status::PartiallyDelivered,
                Status::Read,
                Status::Replied
            ]
        );
    }

    #[test]
    fn unknown_status_is_kept_verbatim() {
        let s = ReportedStatus::new("ON HOLD".into());
        assert_eq!(s.known, None);
        assert_eq!(s.raw, "ON HOLD");
    }
}
