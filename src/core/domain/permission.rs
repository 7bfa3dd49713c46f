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
    /// The suppression list of opted-out numbers (SuppressionService), and its changes
    /// on the event stream. Never granted by leaving `permissions` out of a callers
    /// file: removing a number lets sends reach someone who opted out.
    Suppressions,
}

impl Permission {
    pub(crate) const ALL: [Self; 6] = [
        Self::Send,
        Self::Query,
        Self::Templates,
        Self::Events,
        Self::Admin,
        Self::Suppressions,
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
            Self::Suppressions => "suppressions",
        }
    }

    pub(crate) fn bit(self) -> u8 {
        1 << self as u8
    }
}
