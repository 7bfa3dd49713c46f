//! A number's type, as Google libphonenumber's metadata tells it (the metadata is read
//! in [`crate::core::numbers`]).

/// A number's type, as libphonenumber's metadata tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NumberType {
    /// A mobile number.
    Mobile,
    /// A fixed line.
    FixedLine,
    /// Either: the plan does not tell them apart (e.g. the USA).
    FixedLineOrMobile,
    /// Freephone.
    TollFree,
    /// Premium rate: the caller pays the callee (what SMS pumping targets).
    PremiumRate,
    /// Shared cost.
    SharedCost,
    /// Voice over IP.
    Voip,
    /// A personal number, routed to a mobile or a fixed line.
    PersonalNumber,
    /// A pager.
    Pager,
    /// A universal access (company) number.
    Uan,
    /// Voicemail access.
    Voicemail,
    /// Invalid or unknown: the plan has no such number (or no plan has its code).
    Unknown,
}

impl NumberType {
    /// Every type.
    pub const ALL: [Self; 12] = [
        Self::Mobile,
        Self::FixedLine,
        Self::FixedLineOrMobile,
        Self::TollFree,
        Self::PremiumRate,
        Self::SharedCost,
        Self::Voip,
        Self::PersonalNumber,
        Self::Pager,
        Self::Uan,
        Self::Voicemail,
        Self::Unknown,
    ];

    /// Stable name: options, error metadata, logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Mobile => "mobile",
            Self::FixedLine => "fixed_line",
            Self::FixedLineOrMobile => "fixed_line_or_mobile",
            Self::TollFree => "toll_free",
            Self::PremiumRate => "premium_rate",
            Self::SharedCost => "shared_cost",
            Self::Voip => "voip",
            Self::PersonalNumber => "personal_number",
            Self::Pager => "pager",
            Self::Uan => "uan",
            Self::Voicemail => "voicemail",
            Self::Unknown => "unknown",
        }
    }

    /// The type of a name (`invalid` is another name of `unknown`).
    pub fn from_name(name: &str) -> Option<Self> {
        if name == "invalid" {
            return Some(Self::Unknown);
        }
        Self::ALL.into_iter().find(|t| t.as_str() == name)
    }
}
