//! Callers files for tests and benchmarks, built instead of written as TOML by hand:
//! `Callers::new().caller(Entry::token("billing", TOKEN).rate(1.0, 2)).write(dir)`.
#![allow(dead_code)]

use std::fmt::Write;
use std::path::{Path, PathBuf};

/// The hex SHA-256 of a token, as a callers file names it.
pub fn sha256_hex(token: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// One `[[caller]]` entry.
#[derive(Debug, Clone)]
pub struct Entry {
    name: String,
    token: Option<String>,
    permissions: Option<Vec<&'static str>>,
    events: Option<&'static str>,
    rate: Option<(f64, u32)>,
    memory_share: Option<f64>,
    queries: Option<(f64, u32)>,
    priority: Option<&'static str>,
    max_priority: Option<&'static str>,
}

impl Entry {
    /// A caller authenticated by a bearer token (stored as its SHA-256).
    pub fn token(name: &str, token: &str) -> Self {
        Self {
            token: Some(token.to_owned()),
            ..Self::certificate(name)
        }
    }

    /// A caller authenticated by its client certificate's name (mTLS).
    pub fn certificate(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            token: None,
            permissions: None,
            events: None,
            rate: None,
            memory_share: None,
            queries: None,
            priority: None,
            max_priority: None,
        }
    }

    /// Its sends' lane when they ask none, and the most it may ask.
    pub fn priorities(mut self, priority: &'static str, max_priority: &'static str) -> Self {
        self.priority = Some(priority);
        self.max_priority = Some(max_priority);
        self
    }

    /// Only these permissions (default: all but admin).
    pub fn permissions(mut self, permissions: &[&'static str]) -> Self {
        self.permissions = Some(permissions.to_vec());
        self
    }

    /// Streams every caller's events, not only its own.
    pub fn all_events(mut self) -> Self {
        self.events = Some("all");
        self
    }

    /// Its query rate and burst (every call that sends nothing).
    pub fn queries(mut self, per_second: f64, burst: u32) -> Self {
        self.queries = Some((per_second, burst));
        self
    }

    /// Its send rate and burst.
    pub fn rate(mut self, sends_per_second: f64, burst: u32) -> Self {
        self.rate = Some((sends_per_second, burst));
        self
    }

    /// Its own share of the gRPC port's memory budget.
    pub fn memory_share(mut self, share: f64) -> Self {
        self.memory_share = Some(share);
        self
    }
}

/// A callers file.
#[derive(Debug, Clone, Default)]
pub struct Callers(Vec<Entry>);

impl Callers {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an entry.
    pub fn caller(mut self, entry: Entry) -> Self {
        self.0.push(entry);
        self
    }

    /// The file's TOML.
    pub fn toml(&self) -> String {
        let mut out = String::new();
        for e in &self.0 {
            let _ = writeln!(out, "[[caller]]\nname = {:?}", e.name);
            if let Some(token) = &e.token {
                let _ = writeln!(out, "token_sha256 = \"{}\"", sha256_hex(token));
            }
            if let Some(permissions) = &e.permissions {
                let _ = writeln!(out, "permissions = {permissions:?}");
            }
            if let Some(events) = e.events {
                let _ = writeln!(out, "events = {events:?}");
            }
            if let Some((rate, burst)) = e.rate {
                let _ = writeln!(out, "sends_per_second = {rate:?}\nburst = {burst}");
            }
            if let Some(priority) = e.priority {
                let _ = writeln!(out, "priority = {priority:?}");
            }
            if let Some(max) = e.max_priority {
                let _ = writeln!(out, "max_priority = {max:?}");
            }
            if let Some(share) = e.memory_share {
                let _ = writeln!(out, "memory_share = {share:?}");
            }
            if let Some((rate, burst)) = e.queries {
                let _ = writeln!(
                    out,
                    "queries_per_second = {rate:?}\nqueries_burst = {burst}"
                );
            }
            out.push('\n');
        }
        out
    }

    /// Writes it as `dir/callers.toml` and returns the path.
    pub fn write(&self, dir: &Path) -> PathBuf {
        let path = dir.join("callers.toml");
        std::fs::write(&path, self.toml()).expect("the callers file is written");
        path
    }
}
