//! What a message of the sandbox is: what it carried as received ([`Letter`], what
//! each channel shows: [`Piece`]), the statuses it went through ([`Moment`]), and its
//! simulated delivery ([`Delivery`], to where: [`Target`]). The account's state, the
//! delivery task and the inbox page all read these.

use serde::{Deserialize, Serialize};

use super::billing::Units;
use super::channel::Channel;
use super::magic::Magic;

/// What one send carried, as the sandbox received it; never changes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Letter {
    /// When it was received (RFC 3339).
    pub received: String,
    /// The number it was sent to.
    pub phone: u64,
    /// What each channel would show, in the order they are tried.
    pub pieces: Vec<Piece>,
    /// What it cost, in units.
    pub cost: Units,
    /// The one-time code it carries, as the phone shows it, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Where its final status is posted.
    pub target: Target,
    /// Whether a voice call collects a DTMF digit.
    #[serde(default)]
    pub dtmf: bool,
}

/// What one channel of a message shows the recipient.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Piece {
    pub channel: Channel,
    /// The sender name, for the channels that show one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Anything else the recipient sees: a Viber type, image, button and link.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extras: Vec<(String, String)>,
}

/// One status a message went through.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Moment {
    pub time: String,
    pub channel: Channel,
    pub status: String,
}

/// Where the final status of a message is posted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Target {
    /// Nowhere (no `hook` given, or an operation without one).
    None,
    /// The send's own `hook`.
    Hook(String),
    /// The account's notification address, read when the status is final.
    Account,
}

/// An accepted message whose delivery is simulated.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Delivery {
    pub id: u64,
    pub msg_id: u64,
    pub channels: Vec<Channel>,
    pub magic: Magic,
    pub dtmf: bool,
    pub target: Target,
}
