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
    crate::core::domain::estimate_sms(text).encoding == crate::core::domain::SmsEncoding::Gsm7
}

/// Measures `text` the way SMS is billed, as msgw's EstimateSms counts it: GSM-7 fits
/// 160 septets in one part and 153 per part when concatenated, UCS-2 70 and 67, and a
/// character never splits between two parts.
pub fn sms_size(text: &str) -> SmsSize {
    let estimate = crate::core::domain::estimate_sms(text);
    SmsSize {
        chars: estimate.units as usize,
        parts: estimate.parts,
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
    fn an_escape_pair_never_splits_between_parts() {
        let text = format!("{}€{}", "a".repeat(152), "a".repeat(152));
        assert_eq!(sms_size(&text).parts, 3);
    }

    #[test]
    fn ucs2_boundaries() {
        assert_eq!(sms_size(&"ї".repeat(70)).parts, 1);
        assert_eq!(sms_size(&"ї".repeat(71)).parts, 2);
        assert_eq!(sms_size(&"ї".repeat(134)).parts, 2);
        assert_eq!(sms_size(&"ї".repeat(135)).parts, 3);
    }
}
