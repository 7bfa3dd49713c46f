//! The gateway's `Retry-After` on a refusal for its rate (HTTP 429), read into the
//! delay msgw passes to its callers.

use std::time::Duration;

/// The longest delay msgw passes on: a longer one is more likely a gateway's mistake
/// than advice a caller should wait for, and the caller's retry asks again anyway.
const MAX: Duration = Duration::from_secs(3600);

/// The delay of a `Retry-After` in seconds (`delta-seconds`), at most an hour; `None`
/// when absent or in another form (an HTTP date, a fraction, a sign), so callers get
/// msgw's own default rather than a guess.
pub(super) fn parse(value: Option<&reqwest::header::HeaderValue>) -> Option<Duration> {
    let text = value?.to_str().ok()?.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Digits too many for a u64 are still a number of seconds: over the bound.
    let seconds = text.parse::<u64>().unwrap_or(u64::MAX);
    Some(Duration::from_secs(seconds).min(MAX))
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;

    use super::*;

    fn read(text: &str) -> Option<Duration> {
        parse(Some(&HeaderValue::from_str(text).unwrap()))
    }

    #[test]
    fn seconds_are_read_and_bounded_to_an_hour() {
        assert_eq!(read("1"), Some(Duration::from_secs(1)));
        assert_eq!(read(" 30 "), Some(Duration::from_secs(30)));
        assert_eq!(read("0"), Some(Duration::ZERO));
        assert_eq!(read("3600"), Some(MAX));
        assert_eq!(read("86400"), Some(MAX));
        assert_eq!(read("99999999999999999999999"), Some(MAX));
    }

    #[test]
    fn anything_but_whole_seconds_is_unknown() {
        assert_eq!(parse(None), None);
        for text in [
            "",
            "-1",
            "+5",
            "1.5",
            "5s",
            "soon",
            "Wed, 21 Oct 2015 07:28:00 GMT",
        ] {
            assert_eq!(read(text), None, "{text:?}");
        }
        let not_text = HeaderValue::from_bytes(b"\xff1").unwrap();
        assert_eq!(parse(Some(&not_text)), None);
    }
}
