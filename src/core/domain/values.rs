//! Validated values: once parsed, a value obeys the gateway's rules.

use std::fmt;

/// Why a value was refused; the text is shown to the caller next to the field path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueError(pub String);

impl ValueError {
    fn new(text: impl Into<String>) -> Self {
        Self(text.into())
    }
}

impl fmt::Display for ValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The client's own message id: > 0, the key of status queries and events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientId(u64);

impl ClientId {
    /// Accepts any id above zero.
    pub fn new(id: u64) -> Result<Self, ValueError> {
        if id == 0 {
            return Err(ValueError::new("required: a message id greater than 0"));
        }
        if id > Self::MAX {
            return Err(ValueError::new(format!(
                "must be at most {} (the gateway holds ids as signed 64-bit numbers)",
                Self::MAX
            )));
        }
        Ok(Self(id))
    }

    /// The largest id: JSON numbers above it do not fit the gateway's signed 64-bit ids.
    pub const MAX: u64 = i64::MAX as u64;

    /// The id as the gateway sees it.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for ClientId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A phone number in international format, sent to the gateway as a JSON number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Phone(u64);

impl Phone {
    /// Shortest and longest accepted number, in digits (E.164 allows at most 15).
    pub const MIN_DIGITS: usize = 7;
    /// See [`Phone::MIN_DIGITS`].
    pub const MAX_DIGITS: usize = 15;

    /// Parses digits with an optional leading `+`.
    pub fn parse(input: &str) -> Result<Self, ValueError> {
        let digits = input.strip_prefix('+').unwrap_or(input);
        if digits.is_empty() {
            return Err(ValueError::new(
                "required: a phone number in international format",
            ));
        }
        if !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ValueError::new(
                "must contain only digits (international format, an optional leading +)",
            ));
        }
        if !(Self::MIN_DIGITS..=Self::MAX_DIGITS).contains(&digits.len()) {
            return Err(ValueError::new(format!(
                "must have {} to {} digits, has {}",
                Self::MIN_DIGITS,
                Self::MAX_DIGITS,
                digits.len()
            )));
        }
        if digits.starts_with('0') {
            // The gateway takes the number as a JSON number: a leading zero would vanish.
            return Err(ValueError::new(
                "must start with the country code, not 0 (international format)",
            ));
        }
        digits
            .parse()
            .map(Self)
            .map_err(|_| ValueError::new("must be a number"))
    }

    /// The number as the gateway's JSON number.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Phone {
    /// Its digits, as callers write it without the `+`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Non-empty text: message bodies, signatures, captions, names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Text(String);

/// What a text holds, which bounds its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextKind {
    /// A message body ([`Text::MAX_MESSAGE`]).
    Message,
    /// A sender name ([`Text::MAX_SIGNATURE`]).
    Signature,
    /// A button, caption, voice profile, template name or id ([`Text::MAX_SHORT`]).
    Short,
}

impl TextKind {
    /// The most characters a text of this kind may have.
    pub fn max_chars(self) -> usize {
        match self {
            Self::Message => Text::MAX_MESSAGE,
            Self::Signature => Text::MAX_SIGNATURE,
            Self::Short => Text::MAX_SHORT,
        }
    }
}

impl Text {
    /// Message bodies (SMS, Viber, RCS, voice, templates): above every channel's
    /// longest message (Viber takes 1,000 characters; a long SMS is a few dozen parts).
    pub const MAX_MESSAGE: usize = 5_000;
    /// Short texts (button, caption, voice profile, template name or id).
    pub const MAX_SHORT: usize = 256;
    /// Sender names: an SMS alpha name has 11 characters, other channels' names are short.
    pub const MAX_SIGNATURE: usize = 64;

    /// Refuses empty and whitespace-only text, and text longer than its kind allows;
    /// the text is kept as given.
    pub fn parse(input: &str, kind: TextKind) -> Result<Self, ValueError> {
        let max = kind.max_chars();
        if input.trim().is_empty() {
            return Err(ValueError::new("required: must not be empty"));
        }
        // Bytes bound characters from above: count only when it can matter.
        if input.len() > max && input.chars().count() > max {
            return Err(ValueError::new(format!(
                "must be at most {max} characters, has {}",
                input.chars().count()
            )));
        }
        Ok(Self(input.to_owned()))
    }

    /// `None` for empty input, for fields that are optional.
    pub fn optional(input: &str, kind: TextKind) -> Result<Option<Self>, ValueError> {
        if input.is_empty() {
            Ok(None)
        } else {
            Self::parse(input, kind).map(Some)
        }
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// An absolute http(s) URL: images and button links the recipient's phone opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpUrl(String);

impl HttpUrl {
    /// The longest URL msgw passes on: what browsers and servers reliably handle.
    pub const MAX_LEN: usize = 2_048;

    /// Accepts absolute `http` and `https` URLs with a host.
    pub fn parse(input: &str) -> Result<Self, ValueError> {
        if input.is_empty() {
            return Err(ValueError::new("required: an absolute http(s) URL"));
        }
        if input.len() > Self::MAX_LEN {
            return Err(ValueError::new(format!(
                "must be at most {} characters (longer URLs break browsers and servers)",
                Self::MAX_LEN
            )));
        }
        let url = url::Url::parse(input)
            .map_err(|e| ValueError::new(format!("must be an absolute http(s) URL ({e})")))?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none_or(str::is_empty) {
            return Err(ValueError::new("must be an absolute http(s) URL"));
        }
        // Keep the caller's spelling: the gateway forwards the link as given.
        Ok(Self(input.to_owned()))
    }

    /// The URL as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// How long the gateway keeps trying to deliver, in whole seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetime(u32);

impl Lifetime {
    /// SMS bounds of the gateway.
    pub const SMS: (u32, u32) = (3600, 259_200);
    /// Viber, RCS and Telegram minimum (no maximum is documented).
    pub const MIN_OTHER: u32 = 60;

    /// An SMS lifetime: 3600 to 259200 seconds.
    pub fn sms(seconds: u64) -> Result<Self, ValueError> {
        Self::within(seconds, Self::SMS.0, Self::SMS.1)
    }

    /// A Viber, RCS or Telegram lifetime: at least 60 seconds.
    pub fn at_least_minute(seconds: u64) -> Result<Self, ValueError> {
        Self::within(seconds, Self::MIN_OTHER, u32::MAX)
    }

    fn within(seconds: u64, min: u32, max: u32) -> Result<Self, ValueError> {
        match u32::try_from(seconds) {
            Ok(s) if (min..=max).contains(&s) => Ok(Self(s)),
            _ if max == u32::MAX => Err(ValueError::new(format!(
                "must be at least {min} seconds, is {seconds}"
            ))),
            _ => Err(ValueError::new(format!(
                "must be {min} to {max} seconds, is {seconds}"
            ))),
        }
    }

    /// Seconds, as the gateway takes them.
    pub fn seconds(self) -> u32 {
        self.0
    }
}

/// A one-time password: 4 to 8 digits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtpCode(String);

impl OtpCode {
    /// Accepts 4 to 8 ASCII digits.
    pub fn parse(input: &str) -> Result<Self, ValueError> {
        if !(4..=8).contains(&input.len()) || !input.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ValueError::new("must be 4 to 8 digits"));
        }
        Ok(Self(input.to_owned()))
    }

    /// The code.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phone_strips_plus_and_keeps_digits() {
        assert_eq!(Phone::parse("+380971234567").unwrap().get(), 380971234567);
        assert_eq!(Phone::parse("1234567").unwrap().get(), 1234567);
    }

    #[test]
    fn phone_refuses_bad_shapes() {
        for bad in [
            "",
            "+",
            "123456",
            "1234567890123456",
            "38097 123",
            "0971234567",
            "++380971234567",
            "３８０９７１２３４５",
        ] {
            assert!(Phone::parse(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn lifetimes_follow_gateway_bounds() {
        assert!(Lifetime::sms(3599).is_err());
        assert!(Lifetime::sms(3600).is_ok());
        assert!(Lifetime::sms(259_200).is_ok());
        assert!(Lifetime::sms(259_201).is_err());
        assert!(Lifetime::at_least_minute(59).is_err());
        assert!(Lifetime::at_least_minute(60).is_ok());
        assert!(Lifetime::at_least_minute(u64::from(u32::MAX) + 1).is_err());
    }

    #[test]
    fn otp_codes_are_four_to_eight_digits() {
        assert!(OtpCode::parse("123").is_err());
        assert!(OtpCode::parse("1234").is_ok());
        assert!(OtpCode::parse("12345678").is_ok());
        assert!(OtpCode::parse("123456789").is_err());
        assert!(OtpCode::parse("12a4").is_err());
    }

    #[test]
    fn urls_must_be_absolute_http() {
        assert!(HttpUrl::parse("https://example.org/a.png").is_ok());
        assert!(HttpUrl::parse("http://example.org").is_ok());
        for bad in [
            "",
            "example.org",
            "/a.png",
            "ftp://example.org/x",
            "javascript:alert(1)",
            "https://",
        ] {
            assert!(HttpUrl::parse(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn text_must_not_be_blank() {
        assert!(Text::parse(" \t", TextKind::Short).is_err());
        assert_eq!(Text::optional("", TextKind::Short).unwrap(), None);
        assert!(Text::optional(" ", TextKind::Short).is_err());
    }

    #[test]
    fn text_is_bounded_in_characters_not_bytes() {
        let max = TextKind::Signature.max_chars();
        assert!(
            Text::parse(&"я".repeat(max), TextKind::Signature).is_ok(),
            "twice as many bytes as characters"
        );
        assert!(Text::parse(&"я".repeat(max + 1), TextKind::Signature).is_err());
        assert!(Text::parse(&"x".repeat(max + 1), TextKind::Signature).is_err());
    }

    #[test]
    fn ids_fit_the_gateways_signed_64_bit_numbers() {
        assert!(ClientId::new(i64::MAX as u64).is_ok());
        assert!(ClientId::new(1 << 63).is_err());
        assert!(ClientId::new(u64::MAX).is_err());
        assert!(HttpUrl::parse(&format!("https://e.com/{}", "a".repeat(2_100))).is_err());
    }
}
