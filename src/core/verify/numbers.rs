//! Which numbers verification codes go to, by their type in libphonenumber's metadata
//! (`MSGW_VERIFY_NUMBER_TYPES`): premium-rate, shared-cost and made-up numbers are what
//! SMS pumping sends codes to, and no real user verifies one. Checked before anything
//! of a start is stored or counted; numbers the operator listed as safe
//! (`MSGW_VERIFY_SAFE_PREFIXES`) and, against the built-in sandbox, its magic numbers
//! are not checked.

use std::{fmt, str::FromStr};

use crate::core::domain::{Channel, Error, NumberType, Phone};
use crate::core::numbers::{self, NumberInfo};

/// Where codes may go to a number of one type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codes {
    /// On every channel.
    Allowed,
    /// Only by a voice call: a verification whose channels include voice.
    VoiceOnly,
    /// Not at all.
    Refused,
}

/// The number types codes go to (`mobile,fixed_line_or_mobile,voip,fixed_line:voice`):
/// a type listed alone takes codes on every channel, with `:voice` only by a voice
/// call; `any` takes every type (no check).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumberTypes {
    /// Each allowed type, and whether only by voice.
    allowed: Vec<(NumberType, bool)>,
    /// `any`: no type is refused.
    any: bool,
}

/// The default `MSGW_VERIFY_NUMBER_TYPES`.
pub const DEFAULT_NUMBER_TYPES: &str = "mobile,fixed_line_or_mobile,voip,fixed_line:voice";

impl NumberTypes {
    /// Where codes may go to a number of type `t`.
    pub fn codes(&self, t: NumberType) -> Codes {
        if self.any {
            return Codes::Allowed;
        }
        match self.allowed.iter().find(|(a, _)| *a == t) {
            Some((_, false)) => Codes::Allowed,
            Some((_, true)) => Codes::VoiceOnly,
            None => Codes::Refused,
        }
    }
}

impl Default for NumberTypes {
    fn default() -> Self {
        DEFAULT_NUMBER_TYPES
            .parse()
            .unwrap_or_else(|_| unreachable!("the default number types parse"))
    }
}

impl FromStr for NumberTypes {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let items: Vec<&str> = s
            .split(',')
            .map(str::trim)
            .filter(|i| !i.is_empty())
            .collect();
        if items.is_empty() {
            return Err("no number type: list the types codes go to, or `any`".into());
        }
        if items == ["any"] {
            return Ok(Self {
                allowed: Vec::new(),
                any: true,
            });
        }
        let names: Vec<&str> = NumberType::ALL.iter().map(|t| t.as_str()).collect();
        let mut allowed: Vec<(NumberType, bool)> = Vec::new();
        for item in items {
            let (name, voice) = match item.split_once(':') {
                Some((name, "voice")) => (name.trim(), true),
                Some(_) => return Err(format!("{item:?}: the only qualifier is `:voice`")),
                None => (item, false),
            };
            let t = NumberType::from_name(&name.to_ascii_lowercase()).ok_or_else(|| {
                format!(
                    "{name:?} is not a number type ({}, or `any` alone)",
                    names.join(", ")
                )
            })?;
            if allowed.iter().any(|(a, _)| *a == t) {
                return Err(format!("{name:?} is listed twice"));
            }
            allowed.push((t, voice));
        }
        Ok(Self {
            allowed,
            any: false,
        })
    }
}

impl fmt::Display for NumberTypes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.any {
            return f.write_str("any");
        }
        let items: Vec<String> = self
            .allowed
            .iter()
            .map(|(t, voice)| format!("{}{}", t.as_str(), if *voice { ":voice" } else { "" }))
            .collect();
        f.write_str(&items.join(","))
    }
}

/// What msgw knows of a number, and where verification codes may go to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judged {
    /// What the metadata says.
    pub info: NumberInfo,
    /// Where codes may go.
    pub codes: Codes,
    /// Its type is not checked: the operator listed it as safe, or it is a magic number
    /// of the built-in sandbox.
    pub exempt: bool,
}

/// The number-type rule of verifications.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NumberRule {
    /// The types codes go to.
    pub types: NumberTypes,
    /// Numbers whose type is not checked: `MSGW_VERIFY_SAFE_PREFIXES`.
    pub safe_prefixes: super::guard::SafePrefixes,
    /// Numbers whose type is not checked: the sandbox's magic numbers, when it is the
    /// upstream (they are made-up numbers only it answers).
    pub sandbox_numbers: Vec<u64>,
}

impl NumberRule {
    /// What msgw knows of `phone`, and where codes may go to it.
    pub fn judge(&self, phone: Phone) -> Judged {
        let info = numbers::lookup(phone);
        let exempt = self.sandbox_numbers.contains(&phone.get())
            || self.safe_prefixes.covers(&phone.get().to_string());
        let codes = if exempt {
            Codes::Allowed
        } else {
            self.types.codes(info.number_type)
        };
        Judged {
            info,
            codes,
            exempt,
        }
    }

    /// The channels of `channels` a code to `phone` may go on: all of them, or for a
    /// number its type takes codes only by voice (a fixed line), only the voice ones.
    /// Refuses a verification its type does not allow, or a voice-only number's without
    /// a voice channel: FAILED_PRECONDITION, NUMBER_TYPE_NOT_ALLOWED.
    pub fn check(&self, phone: Phone, channels: &[Channel]) -> Result<Vec<Channel>, Error> {
        let judged = self.judge(phone);
        let refused = |codes| Error::NumberTypeNotAllowed {
            number_type: judged.info.number_type,
            voice_only: codes == Codes::VoiceOnly,
        };
        match judged.codes {
            Codes::Allowed => Ok(channels.to_vec()),
            Codes::VoiceOnly if channels.contains(&Channel::Voice) => Ok(vec![Channel::Voice]),
            codes => Err(refused(codes)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phone(s: &str) -> Phone {
        Phone::parse(s).unwrap()
    }

    #[test]
    fn the_defaults_refuse_premium_shared_cost_and_invalid_numbers() {
        let rule = NumberRule::default();
        let sms = [Channel::Sms];
        let refused = |p: &str| match rule.check(phone(p), &sms) {
            Err(Error::NumberTypeNotAllowed { number_type, .. }) => Some(number_type),
            _ => None,
        };
        assert_eq!(refused("+449012345678"), Some(NumberType::PremiumRate));
        assert_eq!(refused("+870123456789"), Some(NumberType::Unknown));
        assert_eq!(refused("+882012345678"), Some(NumberType::Unknown));
        assert_eq!(refused("+380971234567"), None);
        assert_eq!(refused("+14155550100"), None);
        // A fixed line takes a voice call's code, not a text: only the voice channel of
        // a list is used.
        assert_eq!(refused("+442079000001"), Some(NumberType::FixedLine));
        for list in [
            vec![Channel::Sms, Channel::Voice],
            vec![Channel::Viber, Channel::Sms, Channel::Voice],
            vec![Channel::Voice],
        ] {
            assert_eq!(
                rule.check(phone("+441234567890"), &list).unwrap(),
                [Channel::Voice],
                "{list:?}"
            );
        }
        assert!(
            rule.check(phone("+441234567890"), &[Channel::Viber, Channel::Sms])
                .is_err()
        );
        // A mobile keeps its list.
        assert_eq!(
            rule.check(phone("+380971234567"), &[Channel::Viber, Channel::Sms])
                .unwrap(),
            [Channel::Viber, Channel::Sms]
        );
    }

    #[test]
    fn safe_and_sandbox_numbers_are_not_checked() {
        let rule = NumberRule {
            safe_prefixes: "44901".parse().unwrap(),
            sandbox_numbers: vec![380_000_000_002],
            ..NumberRule::default()
        };
        for p in ["+449012345678", "+380000000002"] {
            let judged = rule.judge(phone(p));
            assert!(judged.exempt && judged.codes == Codes::Allowed, "{p}");
            assert!(rule.check(phone(p), &[Channel::Sms]).is_ok());
        }
        assert!(rule.check(phone("+380000000003"), &[Channel::Sms]).is_err());
    }

    #[test]
    fn number_types_parse_and_print() {
        let t: NumberTypes = DEFAULT_NUMBER_TYPES.parse().unwrap();
        assert_eq!(t.to_string(), DEFAULT_NUMBER_TYPES);
        assert_eq!(t.codes(NumberType::FixedLine), Codes::VoiceOnly);
        assert_eq!(t.codes(NumberType::Pager), Codes::Refused);
        let any: NumberTypes = "any".parse().unwrap();
        assert_eq!(any.codes(NumberType::PremiumRate), Codes::Allowed);
        assert_eq!(
            " Mobile , invalid:voice"
                .parse::<NumberTypes>()
                .unwrap()
                .to_string(),
            "mobile,unknown:voice"
        );
        for bad in ["landline", "mobile:sms", "mobile,mobile", "any,mobile"] {
            assert!(bad.parse::<NumberTypes>().is_err(), "{bad}");
        }
        assert!(" , ".parse::<NumberTypes>().is_err());
    }
}
