//! Where a verification (a one-time code msgw sent and keeps) stands.

/// The state of a verification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VerificationStatus {
    /// Waiting for the right code.
    Pending,
    /// The right code was checked: used up.
    Approved,
    /// Its time to live passed.
    Expired,
    /// Canceled by its caller.
    Canceled,
    /// Locked after too many wrong codes.
    Failed,
}

impl VerificationStatus {
    /// Every status.
    pub const ALL: [Self; 5] = [
        Self::Pending,
        Self::Approved,
        Self::Expired,
        Self::Canceled,
        Self::Failed,
    ];

    /// The stored name (also the metrics label).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Approved => "approved",
            Self::Expired => "expired",
            Self::Canceled => "canceled",
            Self::Failed => "failed",
        }
    }

    /// The status of a stored name.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }
}
