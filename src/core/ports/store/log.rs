//! What an append to the event log carries and answers: delivery reports, whose keyword
//! replies change the suppression list, and callers' changes of the list; each list
//! change is stored with its event in the append's transaction.

use chrono::{DateTime, Utc};

use crate::core::domain::{
    KeywordReply, LogEvent, NewEvent, StatusEvent, Suppression, SuppressionChange, SuppressionEvent,
};

/// One thing to append to the event log.
#[derive(Debug, Clone, PartialEq)]
pub enum LogAppend {
    /// A delivery report, unless the same event is stored already; its replies that are
    /// keywords change the list of the number the report's message went to, in order
    /// (each reply once, however often reports repeat it).
    Report {
        /// The report.
        event: NewEvent,
        /// Its replies that are opt-out or opt-in keywords.
        keywords: Vec<KeywordReply>,
    },
    /// A caller adds (`suppressed`) or removes a number at its time: an add of a number
    /// on the list and a remove of one not on it change nothing and make no event, and
    /// neither does a change older than the number's newest decision.
    Change(SuppressionChange),
}

impl LogAppend {
    /// A report whose replies change nothing.
    pub fn report(event: NewEvent) -> Self {
        Self::Report {
            event,
            keywords: Vec::new(),
        }
    }
}

/// What one [`LogAppend`] did.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Appended {
    /// The report's event; `None` for a duplicate (and for a change).
    pub status: Option<StatusEvent>,
    /// The list changes made, with their events' cursors, in order.
    pub suppressions: Vec<SuppressionEvent>,
    /// A change's entry: after an add, the number's entry (new, or as it was); after a
    /// remove, the entry removed; `None` when a remove found the number not on the list.
    pub entry: Option<Suppression>,
    /// A change not made because a newer decision the other way stands (a reply or a
    /// call of a later time): that decision's time.
    pub superseded: Option<DateTime<Utc>>,
}

impl Appended {
    /// The log events it appended, in cursor order.
    pub fn events(&self) -> Vec<LogEvent> {
        let mut all: Vec<LogEvent> = self
            .status
            .iter()
            .cloned()
            .map(LogEvent::Status)
            .chain(self.suppressions.iter().cloned().map(LogEvent::Suppression))
            .collect();
        all.sort_by_key(LogEvent::cursor);
        all
    }
}
