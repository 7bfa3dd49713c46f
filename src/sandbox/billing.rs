//! Message parts and prices.
//!
//! Money is kept in ten-thousandths of the currency unit so that repeated
//! charges never drift the way float arithmetic does.

use super::channel::Channel;

/// Ten-thousandths of the currency unit.
pub type Units = i64;

/// Units in one currency unit.
pub const UNITS_PER_CURRENCY: i64 = 10_000;

/// Fee of one `call/otp` call (the gateway's fixture shows 0.2).
pub const CALL_OTP_PRICE: Units = 2_000;

/// Fee of one `hlr` lookup.
pub const HLR_PRICE: Units = 1_000;

/// Price of one billed part on `channel`.
pub fn part_price(channel: Channel) -> Units {
    match channel {
        Channel::Sms => 10_000,
        Channel::Viber => 5_000,
        Channel::Rcs => 7_500,
        Channel::Telegram => 2_500,
        Channel::Voice => 15_000,
        Channel::Whatsapp => 6_000,
    }
}

/// Converts a currency amount to units, rounding to the nearest unit.
pub fn to_units(amount: f64) -> Units {
    // Saturating float-to-int casts keep absurd configured balances harmless.
    (amount * UNITS_PER_CURRENCY as f64).round() as Units
}

/// Converts units back to a currency amount (approximate: for inspection only).
pub fn to_amount(units: Units) -> f64 {
    units as f64 / UNITS_PER_CURRENCY as f64
}

/// The amount as the gateway writes it: a JSON number with the exact decimal digits of
/// `units` (`31.1683`, `0.2`), never passed through floating point.
pub fn amount_json(units: Units) -> serde_json::Number {
    let whole = units.unsigned_abs() / UNITS_PER_CURRENCY.unsigned_abs();
    let fraction = units.unsigned_abs() % UNITS_PER_CURRENCY.unsigned_abs();
    let sign = if units < 0 { "-" } else { "" };
    let fraction = format!("{fraction:04}");
    let fraction = fraction.trim_end_matches('0');
    let text = if fraction.is_empty() {
        format!("{sign}{whole}")
    } else {
        format!("{sign}{whole}.{fraction}")
    };
    // A decimal written above always parses; serde_json keeps its digits as written.
    serde_json::from_str(&text).unwrap_or_else(|_| serde_json::Number::from(0))
}

/// GSM 03.38 basic character set (one septet each).
const GSM7_BASIC: &str = "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?\
¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà";

/// GSM 03.38 extension table (escape + char: two septets each).
const GSM7_EXTENSION: &str = "^{}\\[~]|€\u{0C}";

/// Length and part count of an SMS text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SmsSize {
    /// Billing length: septets for GSM-7, UTF-16 code units for UCS-2.
    pub chars: usize,
    /// Number of SMS parts.
    pub parts: u32,
}

/// Whether `text` fits GSM-7 (else it goes as UCS-2).
pub fn is_gsm7(text: &str) -> bool {
    text.chars()
        .all(|c| GSM7_BASIC.contains(c) || GSM7_EXTENSION.contains(c))
}

/// Measures `text` the way SMS is billed: GSM-7 fits 160 chars in one part and
/// 153 per part when concatenated; anything else is UCS-2 with 70 and 67.
pub fn sms_size(text: &str) -> SmsSize {
    let gsm7: Option<usize> = text
        .chars()
        .map(|c| {
            if GSM7_BASIC.contains(c) {
                Some(1)
            } else if GSM7_EXTENSION.contains(c) {
                Some(2)
            } else {
                None
            }
        })
        .sum();
    let (chars, single, multi) = match gsm7 {
        Some(septets) => (septets, 160, 153),
        None => (text.encode_utf16().count(), 70, 67),
    };
    let parts = if chars <= single {
        1
    } else {
        chars.div_ceil(multi)
    };
    SmsSize {
        chars,
        parts: u32::try_from(parts).unwrap_or(u32::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gsm7_boundaries() {
        assert_eq!(sms_size(&"a".repeat(160)).parts, 1);
        assert_eq!(sms_size(&"a".repeat(161)).parts, 2);
        assert_eq!(sms_size(&"a".repeat(306)).parts, 2);
        assert_eq!(sms_size(&"a".repeat(307)).parts, 3);
    }

    #[test]
    fn extension_chars_count_two() {
        let size = sms_size(&"€".repeat(80));
        assert_eq!(
            size,
            SmsSize {
                chars: 160,
                parts: 1
            }
        );
        assert_eq!(sms_size(&format!("{}a", "€".repeat(80))).parts, 2);
    }

    #[test]
    fn ucs2_boundaries() {
        assert_eq!(sms_size(&"ї".repeat(70)).parts, 1);
        assert_eq!(sms_size(&"ї".repeat(71)).parts, 2);
        assert_eq!(sms_size(&"ї".repeat(134)).parts, 2);
        assert_eq!(sms_size(&"ї".repeat(135)).parts, 3);
    }
}
