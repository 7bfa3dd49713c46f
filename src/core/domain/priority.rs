//! How urgent an operation is: the lane it waits in when the gateway's rate or
//! connections are the bottleneck (docs/shaping.md).

use serde::{Deserialize, Serialize};

use super::OpKind;

/// The lane an operation waits in: urgent ones leave first, then normal, then bulk.
/// Ordered by urgency (`Bulk < Normal < Urgent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// Newsletters, campaigns: whatever may wait.
    Bulk,
    /// The default: transactional messages.
    Normal,
    /// One-time codes, alerts: what a person waits for.
    Urgent,
}

impl Priority {
    /// Every lane, most urgent first (the order lanes are served in).
    pub const LANES: [Self; 3] = [Self::Urgent, Self::Normal, Self::Bulk];

    /// The lane's place in [`Priority::LANES`].
    pub const fn lane(self) -> usize {
        match self {
            Self::Urgent => 0,
            Self::Normal => 1,
            Self::Bulk => 2,
        }
    }

    /// The name used in the callers file, metrics and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Urgent => "urgent",
            Self::Normal => "normal",
            Self::Bulk => "bulk",
        }
    }

    /// The lane an operation of `kind` asked at this priority rides: one-time codes
    /// (Telegram, voice) are always urgent, whatever was asked.
    pub const fn for_kind(self, kind: OpKind) -> Self {
        match kind {
            OpKind::SendTelegramOtp | OpKind::SendVoiceOtp => Self::Urgent,
            _ => self,
        }
    }
}

impl std::fmt::Display for Priority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_are_served_most_urgent_first() {
        assert!(Priority::Urgent > Priority::Normal && Priority::Normal > Priority::Bulk);
        for (i, lane) in Priority::LANES.iter().enumerate() {
            assert_eq!(lane.lane(), i);
        }
    }

    #[test]
    fn one_time_codes_are_always_urgent() {
        assert_eq!(
            Priority::Bulk.for_kind(OpKind::SendTelegramOtp),
            Priority::Urgent
        );
        assert_eq!(
            Priority::Bulk.for_kind(OpKind::SendVoiceOtp),
            Priority::Urgent
        );
        assert_eq!(Priority::Bulk.for_kind(OpKind::SendSms), Priority::Bulk);
    }
}
