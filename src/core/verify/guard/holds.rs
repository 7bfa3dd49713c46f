//! What operators do with the guard's holds, from the FraudGuardService and from
//! `msgw guard`: list the ranges held, release one.

use chrono::{DateTime, Utc};

use super::super::store_error;
use crate::core::domain::{Error, ValueError};
use crate::core::ports::store::{RangeHold, Store};

/// Ranges a page lists when the request names no size, and at most.
pub const PAGE_DEFAULT: u32 = 100;
/// See [`PAGE_DEFAULT`].
pub const PAGE_MAX: u32 = 1000;

/// A range as operators write it: 1 to 15 digits, a leading `+` ignored; or the region
/// of a shared calling code as holds name it, `1/JM` (calling code, `/`, two letters,
/// upper-cased).
pub fn parse_range(input: &str) -> Result<String, ValueError> {
    let input = input.trim();
    let input = input.strip_prefix('+').unwrap_or(input);
    let digits = |d: &str, max: usize| {
        !d.is_empty() && d.len() <= max && d.bytes().all(|b| b.is_ascii_digit())
    };
    if let Some((code, region)) = input.split_once('/') {
        if digits(code, 3) && region.len() == 2 && region.bytes().all(|b| b.is_ascii_alphabetic()) {
            return Ok(format!("{code}/{}", region.to_ascii_uppercase()));
        }
    } else if digits(input, 15) {
        return Ok(input.to_owned());
    }
    Err(ValueError(
        "must be a range (1 to 15 digits) or a region of a calling code (1/JM)".into(),
    ))
}

/// One page of the ranges held at `now`, after the range `after`; with the token of
/// the next page (`None` on the last).
pub async fn held(
    store: &dyn Store,
    now: DateTime<Utc>,
    after: &str,
    size: u32,
) -> Result<(Vec<RangeHold>, Option<String>), Error> {
    let size = size.clamp(1, PAGE_MAX);
    // One more than asked tells whether another page follows.
    let mut page = store
        .held_ranges(now, after, size + 1)
        .await
        .map_err(store_error)?;
    let next = (page.len() > size as usize).then(|| {
        page.truncate(size as usize);
        page.last().map(|h| h.range.clone()).unwrap_or_default()
    });
    Ok((page, next))
}

/// Releases the hold of `range` at `now` (`who` released it, for the log).
pub async fn release(
    store: &dyn Store,
    range: &str,
    now: DateTime<Utc>,
    who: &str,
) -> Result<RangeHold, Error> {
    let released = store
        .release_range(range, now)
        .await
        .map_err(store_error)?
        .ok_or_else(|| Error::RangeNotHeld {
            range: range.to_owned(),
        })?;
    tracing::warn!(
        range,
        by = who,
        "fraud guard: range released; its verifications count afresh from now"
    );
    Ok(released)
}

/// One line of `msgw guard list` about `hold`.
pub fn describe(hold: &RangeHold) -> String {
    let at = |t: DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    format!(
        "{:<15} held {} until {}  {} unconverted, {} approved{}",
        hold.range,
        at(hold.held_at),
        at(hold.until),
        hold.unconverted,
        hold.approved,
        if hold.shadow {
            "  (shadow: not enforced)"
        } else {
            ""
        }
    )
}

#[cfg(test)]
mod tests {
    use super::parse_range;

    #[test]
    fn reads_ranges_and_regions() {
        assert_eq!(parse_range(" +881234 ").unwrap(), "881234");
        assert_eq!(parse_range("1/jm").unwrap(), "1/JM");
        assert_eq!(parse_range("+44/JE").unwrap(), "44/JE");
        for bad in [
            "",
            "12a",
            "1/",
            "/JM",
            "1/JAM",
            "1234/JM",
            "1/J1",
            "1234567890123456",
        ] {
            assert!(parse_range(bad).is_err(), "{bad}");
        }
    }
}
