//! Who made a call: the name msgw records with each message, so callers see the
//! delivery events of their own messages only.

use std::{fmt, sync::Arc};

use super::ValueError;

/// Longest caller name: a DNS name's length, since mTLS names come from certificates.
const MAX_LEN: usize = 253;

/// The name of an authenticated caller (an entry of the callers file, or the first DNS
/// SAN or CN of a client certificate): 1 to 253 printable ASCII characters, no spaces.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CallerName(Arc<str>);

impl CallerName {
    /// Parses a name.
    pub fn parse(name: &str) -> Result<Self, ValueError> {
        if name.is_empty() || name.len() > MAX_LEN {
            return Err(ValueError(format!(
                "a caller name must be 1 to {MAX_LEN} characters, got {}",
                name.len()
            )));
        }
        if !name.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ValueError(format!(
                "a caller name must be printable ASCII without spaces, got {name:?}"
            )));
        }
        Ok(Self(name.into()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CallerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caller_names_are_bounded_printable_ascii() {
        assert_eq!(CallerName::parse("billing").unwrap().as_str(), "billing");
        assert!(CallerName::parse("billing.prod.svc.cluster.local").is_ok());
        for bad in ["", "with space", "tab\t", "ünïcode", &"a".repeat(254)] {
            assert!(CallerName::parse(bad).is_err(), "{bad:?}");
        }
    }
}
