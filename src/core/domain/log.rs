//! The entries of the event log: delivery statuses and the suppression list's changes,
//! in one cursor order.

use super::{Cursor, StatusEvent, SuppressionEvent};

/// An entry of the event log: a delivery status, or an opt-out change.
#[derive(Debug, Clone, PartialEq)]
pub enum LogEvent {
    /// A status of a message.
    Status(StatusEvent),
    /// A number opted out or back in.
    Suppression(SuppressionEvent),
}

impl LogEvent {
    /// Its position in the log.
    pub fn cursor(&self) -> Cursor {
        match self {
            Self::Status(e) => e.cursor,
            Self::Suppression(e) => e.cursor,
        }
    }

    /// The status event, if it is one.
    pub fn status(&self) -> Option<&StatusEvent> {
        match self {
            Self::Status(e) => Some(e),
            Self::Suppression(_) => None,
        }
    }

    /// The status event, if it is one, owned.
    pub fn into_status(self) -> Option<StatusEvent> {
        match self {
            Self::Status(e) => Some(e),
            Self::Suppression(_) => None,
        }
    }
}
