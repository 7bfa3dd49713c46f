//! Magic phone numbers that force an outcome, so callers can test failures.

/// Outcome forced by a phone number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Magic {
    /// Any other number: the normal success timeline.
    None,
    /// 380000000001: the send is refused at once.
    Blocked,
    /// 380000000002: final UNDELIVERABLE.
    Undeliverable,
    /// 380000000003: final EXPIRED.
    Expired,
    /// 380000000004: `Error in Sender-name` whatever the signature.
    SenderName,
    /// 380000000005: delivered, but no webhook is ever sent.
    NoWebhook,
    /// 380000000006: every step takes ten times the step delay.
    Slow,
    /// 380000000007: the first channel fails, the next one delivers.
    Fallback,
    /// 380000000008: final REJECTED.
    Rejected,
    /// 380000000009: Viber replies (REPLIED) / voice DTMF reply "1".
    TwoWay,
    /// 380000000010: the operation is carried out (a send is accepted, billed and
    /// delivered), but the whole request is answered with HTTP 502, as when a proxy
    /// loses the gateway's answer.
    LostAnswer,
    /// 380000000011: delivered, and the recipient answers STOP: the delivery webhook
    /// carries the reply (msgw then refuses the number's next sends).
    OptsOut,
}

/// Every magic number. None is a real number (no Ukrainian operator's code is 00):
/// only the sandbox answers them.
pub const NUMBERS: [u64; 11] = [
    380_000_000_001,
    380_000_000_002,
    380_000_000_003,
    380_000_000_004,
    380_000_000_005,
    380_000_000_006,
    380_000_000_007,
    380_000_000_008,
    380_000_000_009,
    380_000_000_010,
    380_000_000_011,
];

impl Magic {
    /// The outcome forced by `phone`.
    pub fn of(phone: u64) -> Self {
        match phone {
            380_000_000_001 => Magic::Blocked,
            380_000_000_002 => Magic::Undeliverable,
            380_000_000_003 => Magic::Expired,
            380_000_000_004 => Magic::SenderName,
            380_000_000_005 => Magic::NoWebhook,
            380_000_000_006 => Magic::Slow,
            380_000_000_007 => Magic::Fallback,
            380_000_000_008 => Magic::Rejected,
            380_000_000_009 => Magic::TwoWay,
            380_000_000_010 => Magic::LostAnswer,
            380_000_000_011 => Magic::OptsOut,
            _ => Magic::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_magic_number_is_listed() {
        for n in NUMBERS {
            assert_ne!(Magic::of(n), Magic::None, "{n}");
        }
        assert_eq!(Magic::of(380_000_000_012), Magic::None);
    }
}
