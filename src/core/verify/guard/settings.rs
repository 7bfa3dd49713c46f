//! How the fraud guard is set: its mode, the range rule's figures, the limits per
//! caller-supplied key and per calling code, and the exempt prefixes: `msgw serve`'s
//! `--verify-fraud-guard` and `--verify-guard-*` options, each declared and bounded
//! here, so a value that passed the command line is a valid setting.

use std::{fmt, str::FromStr, time::Duration};

use super::{BURST, countries};
use crate::base::parse;

/// What the guard does with what it decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Mode {
    /// Refuses what it decides to refuse.
    #[default]
    On,
    /// Decides, counts and logs, refuses nothing: to tune it on real traffic first.
    Shadow,
    /// Neither decides nor records anything.
    Off,
}

impl Mode {
    /// The name used in settings and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::On => "on",
            Self::Shadow => "shadow",
            Self::Off => "off",
        }
    }
}

/// Windows of the guard's counts are at most this long (and its rows kept as long).
pub const MAX_WINDOW: Duration = Duration::from_secs(7 * 86_400);

/// At most `max` verifications per `per`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// The most verifications...
    pub max: u32,
    /// ...in any window this long.
    pub per: Duration,
}

impl FromStr for Rate {
    type Err = String;

    /// `10/1h`: ten an hour.
    fn from_str(s: &str) -> Result<Self, String> {
        let (max, per) = s
            .trim()
            .split_once('/')
            .ok_or_else(|| format!("{s:?} is not a rate: COUNT/WINDOW, e.g. 10/1h"))?;
        let max: u32 = max.trim().parse().ok().filter(|m| *m > 0).ok_or_else(|| {
            format!(
                "{s:?}: the count must be a whole number from 1 to {}",
                u32::MAX
            )
        })?;
        let per = humantime::parse_duration(per.trim()).map_err(|_| {
            format!(
                "{s:?}: the window is not a duration (a number and a unit: s, m, h, d), e.g. 10/1h"
            )
        })?;
        if per < Duration::from_secs(1) || per > MAX_WINDOW {
            return Err(format!("{s:?}: the window must be from 1s to 7d"));
        }
        Ok(Self { max, per })
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.max, humantime::format_duration(self.per))
    }
}

/// `name=rate` pairs, comma-separated; `check` validates each name.
fn pairs<'a>(
    s: &'a str,
    what: &str,
    check: impl Fn(&str) -> bool,
) -> Result<Vec<(&'a str, Rate)>, String> {
    let mut out: Vec<(&str, Rate)> = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (name, rate) = item
            .split_once('=')
            .ok_or_else(|| format!("{item:?} is not {what}=COUNT/WINDOW"))?;
        let name = name.trim();
        let name = name
            .strip_prefix('+')
            .filter(|_| what.contains("calling code"))
            .unwrap_or(name);
        if !check(name) {
            return Err(format!("{item:?}: {name:?} is not {what}"));
        }
        if out.iter().any(|(n, _)| *n == name) {
            return Err(format!("{name:?} is listed twice"));
        }
        out.push((name, rate.parse()?));
    }
    Ok(out)
}

/// The longest name of a rate-limit key.
pub const KEY_NAME_MAX: usize = 32;

/// Whether `name` may name a rate-limit key: 1 to 32 of `a-z 0-9 _ - .`.
pub fn is_key_name(name: &str) -> bool {
    (1..=KEY_NAME_MAX).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-.".contains(&b))
}

/// Limits per caller-supplied key name (`ip=10/1h,user=5/1h`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyLimits(pub Vec<(String, Rate)>);

impl KeyLimits {
    /// The limit of key `name`, if it has one.
    pub fn of(&self, name: &str) -> Option<Rate> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, r)| *r)
    }
}

impl FromStr for KeyLimits {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let list = pairs(s, "a key name (a-z, 0-9, _ - .)", is_key_name)?;
        Ok(Self(
            list.into_iter().map(|(n, r)| (n.to_owned(), r)).collect(),
        ))
    }
}

/// Budgets per calling code (`380=2000/1h,*=200/1h`); `*` is every other code's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CountryLimits {
    /// Each listed calling code's own budget.
    pub codes: Vec<(String, Rate)>,
    /// The budget of each code not listed; `None`: unlimited.
    pub others: Option<Rate>,
}

impl CountryLimits {
    /// The budget of calling code `code` (or of [`countries::UNASSIGNED`] numbers).
    pub fn of(&self, code: &str) -> Option<Rate> {
        self.codes
            .iter()
            .find(|(c, _)| c == code)
            .map(|(_, r)| *r)
            .or(self.others)
    }
}

impl FromStr for CountryLimits {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let list = pairs(s, "a calling code (1 to 3 digits, ITU E.164) or *", |n| {
            n == "*" || countries::is_calling_code(n)
        })?;
        let mut limits = Self::default();
        for (name, rate) in list {
            match name {
                "*" => limits.others = Some(rate),
                code => limits.codes.push((code.to_owned(), rate)),
            }
        }
        Ok(limits)
    }
}

/// Numbers or ranges the guard leaves alone (`MSGW_VERIFY_SAFE_PREFIXES`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SafePrefixes(pub Vec<String>);

impl SafePrefixes {
    /// Whether the number `digits` begins with one of them.
    pub fn covers(&self, digits: &str) -> bool {
        self.0.iter().any(|p| digits.starts_with(p.as_str()))
    }
}

impl FromStr for SafePrefixes {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let mut list = Vec::new();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let digits = item.strip_prefix('+').unwrap_or(item);
            if digits.is_empty()
                || digits.len() > 15
                || digits.starts_with('0')
                || !digits.bytes().all(|b| b.is_ascii_digit())
            {
                return Err(format!(
                    "{item:?} is not a number or range (1 to 15 digits, not starting with 0)"
                ));
            }
            list.push(digits.to_owned());
        }
        Ok(Self(list))
    }
}

/// A range's digits are from 2 to 12.
pub const PREFIX_DIGITS: std::ops::RangeInclusive<usize> = 2..=12;

/// The longest hold.
pub const MAX_HOLD: Duration = Duration::from_secs(30 * 86_400);

/// The fraud guard's settings (see README, "Fraud guard").
#[derive(Debug, Clone, PartialEq, clap::Args)]
#[group(id = "fraud_guard")]
pub struct Settings {
    /// The fraud guard in front of every verification send: `on` (refuses), `shadow`
    /// (decides, counts and logs, refuses nothing) or `off`.
    #[arg(
        long = "verify-fraud-guard",
        env = "MSGW_VERIFY_FRAUD_GUARD",
        default_value = "on",
        value_enum,
        ignore_case = true
    )]
    pub mode: Mode,
    /// A number range is the number's first this many digits (2 to 12).
    #[arg(long = "verify-guard-prefix-digits", env = "MSGW_VERIFY_GUARD_PREFIX_DIGITS", default_value = "6", value_parser = parse::between(*PREFIX_DIGITS.start(), *PREFIX_DIGITS.end()))]
    pub prefix_digits: usize,
    /// The sliding window a range's verifications and approvals are counted over.
    #[arg(long = "verify-guard-window", env = "MSGW_VERIFY_GUARD_WINDOW", default_value = "1h", value_parser = parse::duration_between(Duration::from_secs(1), MAX_WINDOW))]
    pub window: Duration,
    /// A verification this old and not approved counts as unconverted (shorter than
    /// the window).
    #[arg(long = "verify-guard-grace", env = "MSGW_VERIFY_GUARD_GRACE", default_value = "2m", value_parser = parse::duration)]
    pub grace: Duration,
    /// A range is held from this many unconverted codes in the window (or twice as many
    /// unapproved codes however young)...
    #[arg(long = "verify-guard-min-starts", env = "MSGW_VERIFY_GUARD_MIN_STARTS", default_value = "20", value_parser = parse::at_least(1u32))]
    pub min_starts: u32,
    /// ...and a whole calling code from this many (0: calling codes are not judged), the
    /// bound of a pumper spread over many ranges of one calling code...
    #[arg(long = "verify-guard-country-min-starts", env = "MSGW_VERIFY_GUARD_COUNTRY_MIN_STARTS", default_value = "100", value_parser = parse::between(0u32, 1_000_000))]
    pub country_min_starts: u32,
    /// ...when its approved verifications are fewer than this share of its approved
    /// verifications and unconverted codes.
    #[arg(long = "verify-guard-min-conversion", env = "MSGW_VERIFY_GUARD_MIN_CONVERSION", default_value = "0.2", value_parser = parse::share)]
    pub min_conversion: f64,
    /// How long a held range stays held (new verifications to it: PERMISSION_DENIED).
    #[arg(long = "verify-guard-hold", env = "MSGW_VERIFY_GUARD_HOLD", default_value = "1h", value_parser = parse::duration_between(Duration::from_secs(1), MAX_HOLD))]
    pub hold: Duration,
    /// Starts per caller-supplied rate-limit key name (StartVerification's
    /// `rate_limit_keys`), e.g. `ip=10/1h,user=5/1h`. Default: none.
    #[arg(long = "verify-key-limits", env = "MSGW_VERIFY_KEY_LIMITS", default_value = "", value_parser = |s: &str| s.parse::<KeyLimits>())]
    pub key_limits: KeyLimits,
    /// Starts per calling code (ITU E.164, 1 to 3 digits), e.g.
    /// `380=2000/1h,*=200/1h` (`*`: each other code). Default: none.
    #[arg(long = "verify-country-limits", env = "MSGW_VERIFY_COUNTRY_LIMITS", default_value = "", value_parser = |s: &str| s.parse::<CountryLimits>())]
    pub country_limits: CountryLimits,
    /// Numbers or ranges never held by conversion (your own test numbers), e.g.
    /// `380000000,4477009001`; key limits and country budgets still count their codes.
    /// Default: none.
    #[arg(long = "verify-safe-prefixes", env = "MSGW_VERIFY_SAFE_PREFIXES", default_value = "", value_parser = |s: &str| s.parse::<SafePrefixes>())]
    pub safe_prefixes: SafePrefixes,
    /// A rate-limit key (with a limit) that approved a code this recently passes a
    /// range's hold (its own limit still applies); 0: no key does.
    #[arg(long = "verify-trusted-key-window", env = "MSGW_VERIFY_TRUSTED_KEY_WINDOW", default_value = "30d", value_parser = parse::duration_between(Duration::ZERO, MAX_TRUSTED_KEY_WINDOW))]
    pub trusted_key_window: Duration,
}

/// The longest a key stays trusted after its latest approval.
pub const MAX_TRUSTED_KEY_WINDOW: Duration = Duration::from_secs(366 * 86_400);

impl Default for Settings {
    fn default() -> Self {
        parse::defaults()
    }
}

impl Settings {
    /// Settings that are valid but likely to hurt: said in the log at start.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        if self.mode == Mode::Off {
            warnings.push(
                "off (MSGW_VERIFY_FRAUD_GUARD=off): nothing stops SMS pumping but the phone limit"
                    .into(),
            );
            return warnings;
        }
        if self.grace < Duration::from_secs(30) {
            warnings.push(format!(
                "MSGW_VERIFY_GUARD_GRACE={} is shorter than most users take to enter a code: ranges of real users may be held (default 2m)",
                humantime::format_duration(self.grace)
            ));
        }
        if self.prefix_digits > 8 {
            warnings.push(format!(
                "MSGW_VERIFY_GUARD_PREFIX_DIGITS={}: ranges this long hold so few numbers that pumping spread over them is never held; keep 5 to 7, or bound it with MSGW_VERIFY_COUNTRY_LIMITS",
                self.prefix_digits
            ));
        }
        // No longer than a calling code: a whole country (or zone) is never judged.
        for prefix in self.safe_prefixes.0.iter().filter(|p| p.len() <= 3) {
            warnings.push(format!(
                "MSGW_VERIFY_SAFE_PREFIXES has {prefix}: every number that begins with it (a whole country or more) is never judged by conversion; list your own test ranges instead"
            ));
        }
        warnings.extend(self.unset_warnings());
        warnings
    }

    /// What the operator has not set, and what it costs.
    fn unset_warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        let cap = self.country_min_starts.saturating_mul(BURST);
        match (self.country_limits.others, self.country_min_starts) {
            (None, 0) => warnings.push(
                "no country budget for unlisted calling codes (MSGW_VERIFY_COUNTRY_LIMITS has no `*`) and MSGW_VERIFY_GUARD_COUNTRY_MIN_STARTS=0: codes spread over many ranges of one calling code are not bounded; set `*=200/1h`".into(),
            ),
            (None, _) => warnings.push(format!(
                "no country budget for unlisted calling codes (MSGW_VERIFY_COUNTRY_LIMITS has no `*`): each calling code is bounded by its conversion alone, up to {cap} unentered codes an hour; a budget (`*=200/1h`, your own countries listed above it) caps what one costs"
            )),
            _ => {}
        }
        if self.key_limits.0.is_empty() {
            warnings.push(
                "no key limits (MSGW_VERIFY_KEY_LIMITS): one end user is bounded only by the holds of the ranges it targets, and no key is trusted through a hold; pass rate_limit_keys and set e.g. `ip=10/1h,user=5/1h`".into(),
            );
        }
        warnings
    }

    /// The longest window anything is counted over: how long the guard keeps its rows.
    pub fn longest_window(&self) -> Duration {
        let keys = self.key_limits.0.iter().map(|(_, r)| r.per);
        let codes = self.country_limits.codes.iter().map(|(_, r)| r.per);
        let others = self.country_limits.others.iter().map(|r| r.per);
        keys.chain(codes)
            .chain(others)
            .fold(self.window, Duration::max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_that_weaken_the_guard_are_warned_about() {
        let set = Settings {
            key_limits: "ip=10/1h".parse().unwrap(),
            country_limits: "380=2000/1h,*=200/1h".parse().unwrap(),
            ..Settings::default()
        };
        assert_eq!(set.warnings(), Vec::<String>::new());
        let wide = Settings {
            safe_prefixes: "3,38099912".parse().unwrap(),
            ..set.clone()
        };
        let warnings = wide.warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("has 3:"), "{warnings:?}");
    }

    #[test]
    fn what_the_operator_has_not_set_is_warned_about_with_its_bound() {
        let warnings = Settings::default().warnings();
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("up to 200 unentered codes an hour"));
        assert!(warnings[1].contains("no key limits"));
        let unbounded = Settings {
            country_min_starts: 0,
            key_limits: "ip=10/1h".parse().unwrap(),
            ..Settings::default()
        };
        let warnings = unbounded.warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("not bounded"), "{warnings:?}");
    }

    #[test]
    fn parses_key_limits() {
        let limits: KeyLimits = "ip=10/1h, user=5/30m".parse().unwrap();
        assert_eq!(
            limits.of("ip"),
            Some(Rate {
                max: 10,
                per: Duration::from_secs(3600)
            })
        );
        assert_eq!(limits.of("user").unwrap().per, Duration::from_secs(1800));
        assert_eq!(limits.of("device"), None);
        assert!("".parse::<KeyLimits>().unwrap().0.is_empty());
    }

    #[test]
    fn refuses_bad_key_limits() {
        for bad in [
            "ip",
            "ip=10",
            "ip=0/1h",
            "ip=x/1h",
            "ip=10/soon",
            "IP=10/1h",
            "ip=1/1h,ip=2/1h",
            "ip=1/8d",
        ] {
            assert!(bad.parse::<KeyLimits>().is_err(), "{bad}");
        }
    }

    #[test]
    fn parses_country_limits_by_calling_code() {
        let limits: CountryLimits = "380=2000/1h,*=200/1h,+1=50/1d".parse().unwrap();
        assert_eq!(limits.of("380").unwrap().max, 2000);
        assert_eq!(limits.of("1").unwrap().max, 50);
        assert_eq!(limits.of("44").unwrap().max, 200);
        assert_eq!(limits.of("unassigned").unwrap().max, 200);
        let only: CountryLimits = "44=10/1h".parse().unwrap();
        assert_eq!(only.of("380"), None);
        assert!("3801=5/1h".parse::<CountryLimits>().is_err());
        assert!("380=1/1h,+380=5/1h".parse::<CountryLimits>().is_err());
        assert!("28=5/1h".parse::<CountryLimits>().is_err());
    }

    #[test]
    fn safe_prefixes_cover_numbers_that_begin_with_them() {
        let safe: SafePrefixes = "+380000, 4477009".parse().unwrap();
        assert!(safe.covers("380000000001"));
        assert!(safe.covers("447700900123"));
        assert!(!safe.covers("380501234567"));
        assert!("38a".parse::<SafePrefixes>().is_err());
    }

    #[test]
    fn rows_are_kept_for_the_longest_window() {
        assert_eq!(
            Settings::default().longest_window(),
            Duration::from_secs(3600)
        );
        let longest = Settings {
            key_limits: "ip=10/1d".parse().unwrap(),
            ..Settings::default()
        };
        assert_eq!(longest.longest_window(), Duration::from_secs(86_400));
    }
}
