//! What a caller may do: the permission each operation needs (see `OpKind::facts`)
//! and callers-file entries grant.

use serde::Deserialize;

/// What a caller may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Permission {
    /// Every send (and `Batch` items that send).
    Send,
    /// Message status, balance, senders, HLR lookups.
    Query,
    /// SMS and Viber templates.
    Templates,
    /// The delivery event stream.
    Events,
    /// Operators' RPCs: the fraud guard's held ranges (FraudGuardService). Never
    /// granted by leaving `permissions` out of a callers file.
    Admin,
}

impl Permission {
    pub(crate) const ALL: [Self; 5] = [
        Self::Send,
        Self::Query,
        Self::Templates,
        Self::Events,
        Self::Admin,
    ];
    /// What a caller whose entry lists no permissions may do: all but `admin`.
    pub(crate) const DEFAULT: [Self; 4] = [Self::Send, Self::Query, Self::Templates, Self::Events];

    /// The name used in the callers file.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Send => "send",
            Self::Query => "query",
            Self::Templates => "templates",
            Self::Events => "events",
            Self::Admin => "admin",
        }
    }

    pub(crate) fn bit(self) -> u8 {
        1 << self as u8
    }
}
