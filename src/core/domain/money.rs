//! Exact amounts of money. The gateway writes amounts as JSON numbers (`31.1683`);
//! msgw keeps their decimal digits exactly, as whole units plus nanos (the shape of
//! `google.type.Money`), never through floating point.

/// An amount of money in a currency.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Money {
    /// ISO 4217 code; empty when the gateway does not say.
    pub currency: String,
    /// Whole units.
    pub units: i64,
    /// Billionths of a unit, with the sign of `units` (-999,999,999 to 999,999,999).
    pub nanos: i32,
}

/// A decimal msgw cannot hold exactly.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not an exact amount: {0}")]
pub struct MoneyError(String);

/// Longest decimal text accepted.
const MAX_TEXT: usize = 64;

impl Money {
    /// Parses a decimal number as JSON writes it (`31.1683`, `-0.5`, `2E-1`, `7`)
    /// exactly. More than 9 decimal places, unless the extra ones are zeros, and
    /// amounts beyond ±9.2e18 units are refused rather than rounded.
    pub fn parse(text: &str, currency: &str) -> Result<Self, MoneyError> {
        let fail = |why: &str| MoneyError(format!("{why} in {text:?}"));
        let text = text.trim();
        if text.is_empty() || text.len() > MAX_TEXT {
            return Err(fail("empty or too long"));
        }
        let (negative, rest) = match text.as_bytes()[0] {
            b'-' => (true, &text[1..]),
            b'+' => (false, &text[1..]),
            _ => (false, text),
        };
        let (mantissa, exponent) = match rest.find(['e', 'E']) {
            Some(at) => {
                let exp: i64 = rest[at + 1..].parse().map_err(|_| fail("bad exponent"))?;
                (&rest[..at], exp)
            }
            None => (rest, 0),
        };
        if !(-40..=40).contains(&exponent) {
            return Err(fail("exponent out of range"));
        }
        let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if (whole.is_empty() && fraction.is_empty()) || !all_digits(whole) || !all_digits(fraction)
        {
            return Err(fail("not a decimal number"));
        }
        // value = digits × 10^-scale
        let digits = format!("{whole}{fraction}");
        let scale = fraction.len() as i64 - exponent;
        let (int_digits, frac_digits) = if scale <= 0 {
            (
                format!("{digits}{}", "0".repeat(scale.unsigned_abs() as usize)),
                String::new(),
            )
        } else {
            let scale = scale as usize;
            let padded = format!("{}{digits}", "0".repeat(scale.saturating_sub(digits.len())));
            let (i, f) = padded.split_at(padded.len() - scale);
            (i.to_owned(), f.to_owned())
        };
        let (nine, beyond) = frac_digits.split_at(frac_digits.len().min(9));
        if beyond.bytes().any(|b| b != b'0') {
            return Err(fail("more than 9 decimal places"));
        }
        let int_digits = int_digits.trim_start_matches('0');
        let units: i64 = if int_digits.is_empty() {
            0
        } else {
            int_digits.parse().map_err(|_| fail("too large"))?
        };
        let nanos: i32 = format!("{nine:0<9}")
            .parse()
            .map_err(|_| fail("bad fraction"))?;
        let (units, nanos) = if negative {
            (-units, -nanos)
        } else {
            (units, nanos)
        };
        Ok(Self {
            currency: currency.to_owned(),
            units,
            nanos,
        })
    }

    /// The amount as a float, for gauges (approximate by nature).
    pub fn to_f64(&self) -> f64 {
        self.units as f64 + f64::from(self.nanos) / 1e9
    }
}

impl std::fmt::Display for Money {
    /// `31.1683 UAH`: the decimal digits exactly, trailing zeros dropped.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let negative = self.units < 0 || self.nanos < 0;
        let fraction = format!("{:09}", self.nanos.unsigned_abs());
        let fraction = fraction.trim_end_matches('0');
        write!(
            f,
            "{}{}",
            if negative { "-" } else { "" },
            self.units.unsigned_abs()
        )?;
        if !fraction.is_empty() {
            write!(f, ".{fraction}")?;
        }
        if !self.currency.is_empty() {
            write!(f, " {}", self.currency)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(text: &str) -> (i64, i32) {
        let m = Money::parse(text, "UAH").unwrap();
        (m.units, m.nanos)
    }

    #[test]
    fn decimals_are_kept_digit_for_digit() {
        assert_eq!(parts("31.1683"), (31, 168_300_000));
        assert_eq!(parts("0.2"), (0, 200_000_000));
        assert_eq!(parts("-1.75"), (-1, -750_000_000));
        assert_eq!(parts("-0.5"), (0, -500_000_000));
        assert_eq!(parts("7"), (7, 0));
        assert_eq!(parts("2E-1"), (0, 200_000_000));
        assert_eq!(parts("1.5e3"), (1500, 0));
        assert_eq!(parts("0.000000001"), (0, 1));
        assert_eq!(parts("1.1000000000000"), (1, 100_000_000));
        assert_eq!(
            parts("9223372036854775807.999999999"),
            (i64::MAX, 999_999_999)
        );
        assert_eq!(
            Money::parse("31.1683", "UAH").unwrap().to_string(),
            "31.1683 UAH"
        );
        assert_eq!(Money::parse("-0.50", "").unwrap().to_string(), "-0.5");
    }

    #[test]
    fn what_cannot_be_held_exactly_is_refused() {
        for bad in [
            "",
            "-",
            ".",
            "1.2.3",
            "abc",
            "1e",
            "0.0000000001",
            "1e99",
            "9223372036854775808",
            "1,5",
            "NaN",
            "0x10",
        ] {
            assert!(Money::parse(bad, "UAH").is_err(), "{bad:?}");
        }
    }
}
