//! How options read their values: durations, bounded numbers, shares and URLs, each
//! refusing what is out of its bounds with a message that says them. An option states
//! its bounds once, on its flag (`value_parser = parse::between(1, 1024)`); the start's
//! problem lines, `msgw serve --help` and the chart's checks (`msgw options`) read them
//! there.
//!
//! Also [`defaults`]: a settings struct at its flags' defaults, so a default is written
//! once, on the flag, and `Default` impls read it.

use std::{fmt, str::FromStr, time::Duration};

/// The longest duration any option takes: ten years. Longer ones cannot be added to
/// a date (a settle window of 10^11 days would overflow where claims are stamped).
pub const LONGEST: Duration = Duration::from_secs(10 * 365 * 86_400);

/// A duration (`10s`, `1500ms`, `5m`, `7d`) of at most ten years; `0s` allowed.
pub fn duration(value: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(value.trim())
        .map_err(|_| "not a duration: expected a number and a unit (ms, s, m, h, d)")?;
    if d > LONGEST {
        return Err("must be at most 3650d".into());
    }
    Ok(d)
}

/// A duration above zero, at most ten years.
pub fn positive_duration(value: &str) -> Result<Duration, String> {
    match duration(value)? {
        d if d.is_zero() => Err("must be above zero".into()),
        d => Ok(d),
    }
}

/// A duration from `min` to `max`.
pub fn duration_between(
    min: Duration,
    max: Duration,
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    move |value| {
        let d = duration(value)?;
        match (min.is_zero(), d < min || d > max) {
            (_, false) => Ok(d),
            (true, true) => Err(format!("must be at most {}", shown(max))),
            (false, true) => Err(format!("must be from {} to {}", shown(min), shown(max))),
        }
    }
}

/// `d` as an option would be written: `7d`, `1h`, `90s`, `500ms`.
pub fn shown(d: Duration) -> String {
    let (secs, millis) = (d.as_secs(), d.subsec_millis());
    match secs {
        _ if d.is_zero() => "0s".to_owned(),
        _ if millis != 0 || secs == 0 => format!("{}ms", d.as_millis()),
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// A whole number from `min` to `max`.
pub fn between<T>(min: T, max: T) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync
where
    T: FromStr + PartialOrd + fmt::Display + Copy + Send + Sync + 'static,
{
    move |value| {
        let n = whole::<T>(value)?;
        if n < min || n > max {
            return Err(format!("must be between {min} and {max}"));
        }
        Ok(n)
    }
}

/// A whole number of at least `min` (and at most what its type holds).
pub fn at_least<T>(min: T) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync
where
    T: FromStr + PartialOrd + fmt::Display + Copy + Send + Sync + 'static,
{
    move |value| {
        let n = whole::<T>(value)?;
        if n < min {
            return Err(format!("must be at least {min}"));
        }
        Ok(n)
    }
}

fn whole<T: FromStr>(value: &str) -> Result<T, String> {
    value
        .trim()
        .parse()
        .map_err(|_| "not a whole number (or too large)".to_owned())
}

/// A share from 0 to 1 (`0.2`).
pub fn share(value: &str) -> Result<f64, String> {
    value
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|v| (0.0..=1.0).contains(v))
        .ok_or_else(|| "not a share from 0 to 1 (e.g. 0.2)".to_owned())
}

/// A share at most `most` (`0.1`).
pub fn share_at_most(most: f64) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync {
    move |value| {
        share(value)
            .ok()
            .filter(|v| *v <= most)
            .ok_or_else(|| format!("not a share from 0 to {most} (e.g. 0.1)"))
    }
}

/// An absolute `http` or `https` URL.
pub fn http_url(value: &str) -> Result<url::Url, String> {
    let url = url::Url::parse(value.trim()).map_err(|e| format!("not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err("must be an absolute http(s) URL".into());
    }
    Ok(url)
}

/// Text with something in it besides spaces.
pub fn not_blank(value: &str) -> Result<String, String> {
    match value.trim() {
        "" => Err("must not be empty".into()),
        _ => Ok(value.to_owned()),
    }
}

/// `T` at its flags' defaults, whatever the environment holds: what a settings
/// struct's `Default` returns, so its defaults are the ones its flags state.
pub fn defaults<T: clap::Args + clap::FromArgMatches>() -> T {
    let command = T::augment_args(clap::Command::new("defaults"))
        .mut_args(|arg| arg.env(None::<&'static str>));
    command
        .try_get_matches_from(["defaults"])
        .and_then(|matches| T::from_arg_matches(&matches))
        // Every option has a default or is optional: config/tests.rs checks them all.
        .unwrap_or_else(|e| panic!("a flag without a default is required: {e}"))
}

/// A size in bytes: a number with an optional unit (`B`, `KiB`, `MiB`, `GiB`, or `KB`,
/// `MB`, `GB` in powers of ten), e.g. `64MiB`; at least 1 MiB.
pub fn size(value: &str) -> Result<u64, String> {
    const EXAMPLE: &str = "expected a size such as 64MiB, 512MB or 1GiB";
    let value = value.trim();
    let split = value
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(value.len());
    let (digits, unit) = value.split_at(split);
    let unit_bytes: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" | "Ki" => 1 << 10,
        "MiB" | "Mi" => 1 << 20,
        "GiB" | "Gi" => 1 << 30,
        "KB" | "K" => 1_000,
        "MB" | "M" => 1_000_000,
        "GB" | "G" => 1_000_000_000,
        other => return Err(format!("unknown unit {other:?}: {EXAMPLE}")),
    };
    let n: u64 = digits.parse().map_err(|_| EXAMPLE.to_owned())?;
    let bytes = n
        .checked_mul(unit_bytes)
        .ok_or_else(|| format!("too large: {EXAMPLE}"))?;
    if bytes < 1 << 20 {
        return Err(format!("must be at least 1MiB: {EXAMPLE}"));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_said_in_the_refusal() {
        assert_eq!(
            between(1usize, 1024)("0"),
            Err("must be between 1 and 1024".into())
        );
        assert_eq!(between(1usize, 1024)("1024"), Ok(1024));
        assert_eq!(at_least(1u32)("0"), Err("must be at least 1".into()));
        assert!(at_least(1u32)("x").is_err());
        let window = duration_between(Duration::from_secs(1), Duration::from_secs(7 * 86_400));
        assert_eq!(window("8d"), Err("must be from 1s to 7d".into()));
        assert_eq!(
            duration_between(Duration::ZERO, Duration::from_secs(3600))("2h"),
            Err("must be at most 1h".into())
        );
        assert_eq!(positive_duration("0s"), Err("must be above zero".into()));
        assert!(duration("100000000000d").unwrap_err().contains("3650d"));
        assert!(http_url("ftp://example.com").is_err());
        assert!(share("1.5").is_err());
    }

    #[test]
    fn parses_sizes_with_units() {
        assert_eq!(size("64MiB"), Ok(64 << 20));
        assert_eq!(size("64Mi"), Ok(64 << 20));
        assert_eq!(size("1GiB"), Ok(1 << 30));
        assert_eq!(size("512MB"), Ok(512_000_000));
        assert_eq!(size("2097152"), Ok(2 << 20));
        assert!(size("1KiB").unwrap_err().contains("at least 1MiB"));
        assert!(size("64 bananas").unwrap_err().contains("64MiB"));
        assert!(size("").is_err());
        assert!(size("-5MiB").is_err());
        assert!(size("99999999999999999999GiB").is_err());
    }
}
