//! The ISO 8601 date-times the gateway may send, beyond RFC 3339: an offset `Z`,
//! `+hh:mm`, `+hhmm` or `+hh` (or none: UTC), the basic format (`20261128T100722Z`), a
//! space instead of the `T`, and a fraction of the second (`.` or `,`, up to nanoseconds;
//! more digits are cut). A date without a time, a week or ordinal date, or anything else
//! is not read (`None`): nothing in it is guessed.

use chrono::{DateTime, FixedOffset, NaiveDate, NaiveDateTime, NaiveTime, TimeZone, Utc};

/// `s` as an instant, if it is one of the forms above.
pub fn parse(s: &str) -> Option<DateTime<Utc>> {
    let s = s.trim();
    if !s.is_ascii() {
        return None;
    }
    let sep = s.find(['T', 't', ' '])?;
    let (date, rest) = (&s[..sep], &s[sep + 1..]);
    let date = parse_date(date)?;
    let offset_at = rest.find(['Z', 'z', '+', '-']).unwrap_or(rest.len());
    let (time, offset) = (&rest[..offset_at], &rest[offset_at..]);
    let time = parse_time(time)?;
    let offset = parse_offset(offset)?;
    let local = NaiveDateTime::new(date, time);
    offset
        .from_local_datetime(&local)
        .single()
        .map(|t| t.with_timezone(&Utc))
}

/// Exactly `n` ASCII digits as a number.
fn digits(s: &str, n: usize) -> Option<u32> {
    (s.len() == n && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

/// `YYYY-MM-DD` or `YYYYMMDD`.
fn parse_date(s: &str) -> Option<NaiveDate> {
    let (y, m, d) = match s.len() {
        10 if s.as_bytes()[4] == b'-' && s.as_bytes()[7] == b'-' => (&s[0..4], &s[5..7], &s[8..10]),
        8 => (&s[0..4], &s[4..6], &s[6..8]),
        _ => return None,
    };
    let year = i32::try_from(digits(y, 4)?).ok()?;
    NaiveDate::from_ymd_opt(year, digits(m, 2)?, digits(d, 2)?)
}

/// `hh:mm:ss`, `hhmmss`, `hh:mm` or `hhmm`, with an optional fraction of the second.
fn parse_time(s: &str) -> Option<NaiveTime> {
    let (whole, fraction) = match s.find(['.', ',']) {
        Some(at) => (&s[..at], Some(&s[at + 1..])),
        None => (s, None),
    };
    let (h, m, sec) = match whole.len() {
        8 if whole.as_bytes()[2] == b':' && whole.as_bytes()[5] == b':' => {
            (&whole[0..2], &whole[3..5], Some(&whole[6..8]))
        }
        6 => (&whole[0..2], &whole[2..4], Some(&whole[4..6])),
        5 if whole.as_bytes()[2] == b':' => (&whole[0..2], &whole[3..5], None),
        4 => (&whole[0..2], &whole[2..4], None),
        _ => return None,
    };
    let nanos = match fraction {
        None => 0,
        // A fraction needs the seconds it divides, and at least one digit.
        Some(f) if sec.is_some() && !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()) => {
            let kept = &f[..f.len().min(9)];
            digits(kept, kept.len())? * 10u32.pow(9 - u32::try_from(kept.len()).ok()?)
        }
        Some(_) => return None,
    };
    let sec = match sec {
        Some(sec) => digits(sec, 2)?,
        None => 0,
    };
    NaiveTime::from_hms_nano_opt(digits(h, 2)?, digits(m, 2)?, sec, nanos)
}

/// `Z`, `+hh:mm`, `+hhmm`, `+hh` (or `-`), or nothing (UTC).
fn parse_offset(s: &str) -> Option<FixedOffset> {
    if s.is_empty() || s.eq_ignore_ascii_case("z") {
        return FixedOffset::east_opt(0);
    }
    let sign = match s.as_bytes()[0] {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let s = &s[1..];
    let (h, m) = match s.len() {
        5 if s.as_bytes()[2] == b':' => (&s[0..2], &s[3..5]),
        4 => (&s[0..2], &s[2..4]),
        2 => (s, "00"),
        _ => return None,
    };
    let (h, m) = (digits(h, 2)?, digits(m, 2)?);
    if h > 23 || m > 59 {
        return None;
    }
    FixedOffset::east_opt(sign * i32::try_from(h * 3600 + m * 60).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn reads_the_forms_the_gateway_may_send() {
        let t = utc("2026-11-28T10:07:22Z");
        for form in [
            "2026-11-28T10:07:22Z",
            "2026-11-28T10:07:22+00:00",
            "2026-11-28T10:07:22+0000",
            "2026-11-28T10:07:22+00",
            "2026-11-28T12:07:22+02:00",
            "2026-11-28T12:07:22+0200",
            "2026-11-28T07:07:22-03",
            "20261128T100722Z",
            "20261128T120722+0200",
            "2026-11-28 10:07:22",
            "2026-11-28T10:07:22",
            "2026-11-28t10:07:22z",
            " 2026-11-28T10:07:22Z ",
        ] {
            assert_eq!(parse(form), Some(t), "{form}");
        }
        assert_eq!(
            parse("2026-11-28T10:07Z"),
            Some(utc("2026-11-28T10:07:00Z"))
        );
        assert_eq!(
            parse("2026-11-28T10:07:22.5+00"),
            Some(utc("2026-11-28T10:07:22.5Z"))
        );
        assert_eq!(
            parse("20261128T100722,123456789123Z"),
            Some(utc("2026-11-28T10:07:22.123456789Z"))
        );
    }

    #[test]
    fn reads_nothing_else() {
        for bad in [
            "",
            "garbage",
            "2026-11-28",
            "2026-11-28T",
            "2026-13-01T00:00:00Z",
            "2026-11-28T24:00:00Z",
            "2026-11-28T10:07:22+24:00",
            "2026-11-28T10:07:22+2",
            "2026-11-28T10:07:22.Z",
            "2026-11-28T10:07.5Z",
            "2026-W48-6T10:07:22Z",
            "2026-332T10:07:22Z",
            "2026-11-28T10:07:22 UTC",
            "2026-11-28T10:07:22Zjunk",
            "２０２６-11-28T10:07:22Z",
            "-2026-11-28T10:07:22Z",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}
