//! The callers file: who may call msgw, what each may do, and how fast each may send
//! and ask.
//!
//! ```toml
//! [[caller]]
//! name = "billing"
//! token_sha256 = "<hex sha-256 of the token>"   # the file never holds the token
//!                                                # (a list during a rotation)
//! permissions = ["send", "query", "templates", "events"]   # optional, default all
//! events = "own"            # optional: "own" (default) or "all"
//! sends_per_second = 50     # optional token bucket of sends
//! burst = 100               # optional, of sends_per_second
//! queries_per_second = 20   # optional token bucket of every call that sends nothing
//! queries_burst = 40        # optional, of queries_per_second
//! memory_share = 0.5        # optional: its share of the gRPC port's memory budget
//! priority = "normal"       # optional: its sends' lane when they ask none
//!                           # ("urgent", "normal" (default) or "bulk")
//! max_priority = "normal"   # optional: the most it may ask (default "urgent")
//! ```

use std::{
    collections::HashMap,
    path::Path,
    sync::{Arc, Mutex},
    time::Duration,
};

use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

pub use crate::core::domain::Permission;
use crate::core::domain::{CallerName, Priority};

/// Whose delivery events a caller streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventScope {
    /// Only those of messages it sent.
    #[default]
    Own,
    /// Every caller's.
    All,
}

/// An authenticated caller (or, when msgw runs without caller authentication, the
/// anonymous caller who may do everything).
#[derive(Debug)]
pub struct Caller {
    /// Its name; `None`: anonymous.
    pub name: Option<CallerName>,
    permissions: u8,
    /// Whose events it streams.
    pub events: EventScope,
    rate: Option<Arc<Rate>>,
    /// The rate of calls that send nothing (queries, streams, lists, changes).
    queries: Option<Arc<Rate>>,
    /// Its share of the gRPC port's memory budget (`None`: the port's default).
    pub memory_share: Option<f64>,
    /// The lane of its sends that ask none.
    pub priority: Priority,
    /// The most urgent lane it may ask for.
    pub max_priority: Priority,
}

impl Caller {
    /// The caller of a msgw without caller authentication: anything goes.
    pub fn anonymous() -> Self {
        Self {
            name: None,
            permissions: Permission::ALL.iter().fold(0, |bits, p| bits | p.bit()),
            events: EventScope::All,
            rate: None,
            queries: None,
            memory_share: None,
            priority: Priority::Normal,
            max_priority: Priority::Urgent,
        }
    }

    /// A caller known by its client certificate only (mTLS without a callers file):
    /// every permission, its own events, no rate limit.
    pub fn certified(name: CallerName) -> Self {
        Self {
            name: Some(name),
            events: EventScope::Own,
            ..Self::anonymous()
        }
    }

    /// Whether it may do `permission`.
    pub fn may(&self, permission: Permission) -> bool {
        self.permissions & permission.bit() != 0
    }

    /// The name for logs and metrics.
    pub fn label(&self) -> &str {
        self.name.as_ref().map_or("anonymous", CallerName::as_str)
    }

    /// Takes `sends` from its send rate; `Err(wait)` when they are over it (nothing is
    /// taken), with how long until they would fit, `None` if they never fit the burst.
    pub fn take_sends(&self, sends: u32) -> Result<(), Option<Duration>> {
        match &self.rate {
            Some(rate) if sends > 0 => rate.take(f64::from(sends)),
            _ => Ok(()),
        }
    }

    /// Takes one call that sends nothing from its query rate; `Err(wait)` when it is
    /// over it, with how long until one fits.
    pub fn take_query(&self) -> Result<(), Duration> {
        match &self.queries {
            // A burst is at least 1: one call always fits in time.
            Some(rate) => rate
                .take(1.0)
                .map_err(|wait| wait.unwrap_or(Duration::from_secs(1))),
            None => Ok(()),
        }
    }

    /// Whether a stream of this caller sees an event of a message `sender` sent.
    pub fn sees_events_of(&self, sender: Option<&CallerName>) -> bool {
        self.events == EventScope::All || (self.name.is_some() && self.name.as_ref() == sender)
    }
}

/// A token bucket: of sends, or of queries.
#[derive(Debug)]
struct Rate {
    per_second: f64,
    burst: f64,
    /// Tokens left, when last counted.
    bucket: Mutex<(f64, Instant)>,
}

impl Rate {
    fn new(per_second: f64, burst: f64) -> Self {
        Self {
            per_second,
            burst,
            bucket: Mutex::new((burst, Instant::now())),
        }
    }

    fn take(&self, n: f64) -> Result<(), Option<Duration>> {
        if n > self.burst {
            return Err(None);
        }
        let mut bucket = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let (tokens, counted) = *bucket;
        let tokens =
            (tokens + now.duration_since(counted).as_secs_f64() * self.per_second).min(self.burst);
        if tokens >= n {
            *bucket = (tokens - n, now);
            Ok(())
        } else {
            *bucket = (tokens, now);
            Err(Some(Duration::from_secs_f64(
                (n - tokens) / self.per_second,
            )))
        }
    }
}

/// One `[[caller]]` of the file, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    token_sha256: Option<Hashes>,
    permissions: Option<Vec<Permission>>,
    #[serde(default)]
    events: EventScope,
    sends_per_second: Option<f64>,
    burst: Option<f64>,
    queries_per_second: Option<f64>,
    queries_burst: Option<f64>,
    memory_share: Option<f64>,
    priority: Option<Priority>,
    max_priority: Option<Priority>,
}

/// One token hash, or several while a token is rotated.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Hashes {
    One(String),
    Many(Vec<String>),
}

impl Hashes {
    fn list(&self) -> &[String] {
        match self {
            Self::One(hash) => std::slice::from_ref(hash),
            Self::Many(hashes) => hashes,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    caller: Vec<Entry>,
}

/// Most sends (or queries) per second a caller can be given (beyond it, leave the rate
/// out).
const MAX_RATE: f64 = 1_000_000.0;

/// The callers of a loaded callers file.
#[derive(Debug, Default)]
pub struct Callers {
    by_token: HashMap<[u8; 32], Arc<Caller>>,
    by_name: HashMap<CallerName, Arc<Caller>>,
}

impl Callers {
    /// Reads and checks a callers file; `previous` (the file before a reload) keeps the
    /// send and query buckets of callers whose rates did not change, so a reload grants no burst.
    pub fn load(path: &Path, previous: Option<&Callers>) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the callers file {}: {e}", path.display()))?;
        let callers = Self::parse(&text, previous)
            .map_err(|e| format!("the callers file {}: {e}", path.display()))?;
        // An empty or truncated file (a half-written Secret, a bad edit) would lock every
        // caller out: it is refused at start, and a reload keeps the callers it had.
        if callers.is_empty() {
            return Err(format!(
                "the callers file {} lists no [[caller]]: msgw needs at least one caller in it (is the file empty or truncated?)",
                path.display()
            ));
        }
        Ok(callers)
    }

    /// Parses and checks the text of a callers file.
    pub fn parse(text: &str, previous: Option<&Callers>) -> Result<Self, String> {
        let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
        let mut callers = Self::default();
        for (i, entry) in file.caller.into_iter().enumerate() {
            let at = format!("caller[{i}]");
            let name = CallerName::parse(&entry.name).map_err(|e| format!("{at}.name: {e}"))?;
            let tokens = entry
                .token_sha256
                .as_ref()
                .map_or(&[][..], Hashes::list)
                .iter()
                .map(|hex| parse_sha256(hex).map_err(|e| format!("{at}.token_sha256: {e}")))
                .collect::<Result<Vec<_>, _>>()?;
            let permissions = match &entry.permissions {
                None => Permission::DEFAULT.to_vec(),
                Some(list) if list.is_empty() => {
                    return Err(format!(
                        "{at}.permissions is empty: list what {name} may do, or leave it out for everything"
                    ));
                }
                Some(list) => list.clone(),
            };
            let old = previous.and_then(|p| p.by_name.get(&name));
            let sends = (entry.sends_per_second, entry.burst);
            let sends = rate(sends, ("sends_per_second", "burst"), &at)?
                .map(|wanted| kept(old.and_then(|o| o.rate.as_ref()), wanted));
            let queries = (entry.queries_per_second, entry.queries_burst);
            let queries = rate(queries, ("queries_per_second", "queries_burst"), &at)?
                .map(|wanted| kept(old.and_then(|o| o.queries.as_ref()), wanted));
            if let Some(share) = entry.memory_share
                && !(share > 0.0 && share <= 1.0)
            {
                return Err(format!(
                    "{at}.memory_share must be above 0 and at most 1 (a share of MSGW_GRPC_MEMORY_BUDGET), got {share}"
                ));
            }
            let max_priority = entry.max_priority.unwrap_or(Priority::Urgent);
            let priority = entry.priority.unwrap_or(Priority::Normal.min(max_priority));
            if priority > max_priority {
                return Err(format!(
                    "{at}.priority {priority} is above its max_priority {max_priority}"
                ));
            }
            let caller = Arc::new(Caller {
                name: Some(name.clone()),
                permissions: permissions.iter().fold(0, |bits, p| bits | p.bit()),
                events: entry.events,
                rate: sends,
                queries,
                memory_share: entry.memory_share,
                priority,
                max_priority,
            });
            if callers
                .by_name
                .insert(name.clone(), caller.clone())
                .is_some()
            {
                return Err(format!("{at}.name: {name} is listed twice"));
            }
            for token in tokens {
                if callers.by_token.insert(token, caller.clone()).is_some() {
                    return Err(format!("{at}.token_sha256: a token is listed twice"));
                }
            }
        }
        Ok(callers)
    }

    /// The caller whose token this is.
    pub fn by_token(&self, token: &str) -> Option<&Arc<Caller>> {
        self.by_token
            .get(&<[u8; 32]>::from(Sha256::digest(token.as_bytes())))
    }

    /// The caller of this name (for client certificates).
    pub fn by_name(&self, name: &CallerName) -> Option<&Arc<Caller>> {
        self.by_name.get(name)
    }

    /// How many callers are listed.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

/// The bucket of the file before a reload (`old`) when its rate is unchanged, so a
/// reload grants no burst; else a new, full one.
fn kept(old: Option<&Arc<Rate>>, (per_second, burst): (f64, f64)) -> Arc<Rate> {
    old.filter(|old| old.per_second == per_second && old.burst == burst)
        .cloned()
        .unwrap_or_else(|| Arc::new(Rate::new(per_second, burst)))
}

/// A checked rate of an entry, per second and burst, from its two fields (`names`);
/// the burst defaults to the rate rounded up.
fn rate(
    (per_second, burst): (Option<f64>, Option<f64>),
    (rate_name, burst_name): (&str, &str),
    at: &str,
) -> Result<Option<(f64, f64)>, String> {
    let Some(per_second) = per_second else {
        if burst.is_some() {
            return Err(format!("{at}.{burst_name} needs {rate_name}"));
        }
        return Ok(None);
    };
    if !(per_second > 0.0 && per_second <= MAX_RATE) {
        return Err(format!(
            "{at}.{rate_name} must be above 0 and at most {MAX_RATE}, got {per_second}"
        ));
    }
    let burst = burst.unwrap_or(per_second.ceil());
    if !(1.0..=MAX_RATE).contains(&burst) || burst.fract() != 0.0 {
        return Err(format!(
            "{at}.{burst_name} must be a whole number from 1 to {MAX_RATE}, got {burst}"
        ));
    }
    Ok(Some((per_second, burst)))
}

fn parse_sha256(hex: &str) -> Result<[u8; 32], String> {
    // `sha256sum` prints `<hash>  -` for its standard input: pasted whole, it still reads.
    let hex = hex.trim();
    let hex = hex.strip_suffix('-').map_or(hex, str::trim_end);
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!(
            "must be the 64 hex digits of the token's SHA-256, got {} characters (print them with `printf %s \"$TOKEN\" | sha256sum | cut -d' ' -f1`)",
            hex.chars().count()
        ));
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|e| e.to_string())?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
