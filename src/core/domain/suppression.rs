//! Opt-outs: the numbers msgw sends nothing to (its suppression list), how a number
//! gets on and off it (callers, keyword replies), and its changes as events.

use chrono::{DateTime, Utc};

use super::{CallerName, ClientId, Cursor, DeliveryReport, Phone, ValueError};

/// Longest reason kept with an entry, in characters.
pub const MAX_REASON_CHARS: usize = 256;

/// How a number got on (or off) the suppression list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SuppressionSource {
    /// The recipient replied with a keyword to a message msgw sent.
    Reply,
    /// A caller of SuppressionService.
    Api,
}

impl SuppressionSource {
    /// Stable name, as stored and as metrics label it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Reply => "reply",
            Self::Api => "api",
        }
    }

    /// The source of a stored name.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "reply" => Some(Self::Reply),
            "api" => Some(Self::Api),
            _ => None,
        }
    }
}

/// Why a caller adds or removes a number, for the record: at most
/// [`MAX_REASON_CHARS`] characters, no control characters (empty allowed).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Reason(String);

impl Reason {
    /// Parses a caller's reason.
    pub fn parse(text: &str) -> Result<Self, ValueError> {
        let chars = text.chars().count();
        if chars > MAX_REASON_CHARS {
            return Err(ValueError(format!(
                "must be at most {MAX_REASON_CHARS} characters, has {chars}"
            )));
        }
        if text.chars().any(char::is_control) {
            return Err(ValueError("must not contain control characters".into()));
        }
        Ok(Self(text.to_owned()))
    }

    /// A reply's keyword as the recipient wrote it, cut to [`MAX_REASON_CHARS`].
    pub fn keyword(text: &str) -> Self {
        Self(
            text.chars()
                .filter(|c| !c.is_control())
                .take(MAX_REASON_CHARS)
                .collect(),
        )
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The text, owned.
    pub fn into_string(self) -> String {
        self.0
    }
}

/// One number on the suppression list.
#[derive(Debug, Clone, PartialEq)]
pub struct Suppression {
    /// The number.
    pub phone: Phone,
    /// How it was added.
    pub source: SuppressionSource,
    /// The reply's keyword as written (source reply), or the caller's reason (source api).
    pub reason: Reason,
    /// The message the reply answered (source reply).
    pub client_id: Option<ClientId>,
    /// The caller that added it (source api, with caller authentication).
    pub caller: Option<CallerName>,
    /// The time of the decision that added it: the reply's own time, or the call's.
    pub created_at: DateTime<Utc>,
}

/// A change of the list: a number opted out (`suppressed`) or back in.
#[derive(Debug, Clone, PartialEq)]
pub struct SuppressionChange {
    /// The number.
    pub phone: Phone,
    /// True: the number is now suppressed; false: it was removed.
    pub suppressed: bool,
    /// How.
    pub source: SuppressionSource,
    /// The keyword as written (source reply), or the caller's reason (source api).
    pub reason: Reason,
    /// The message the reply answered (source reply).
    pub client_id: Option<ClientId>,
    /// The caller (source api, with caller authentication).
    pub caller: Option<CallerName>,
    /// The time of the decision: the reply's own (see [`KeywordReply::decided_at`]), or
    /// when the caller asked. The newest decision of a number is its state, whatever
    /// order decisions arrive in.
    pub at: DateTime<Utc>,
}

impl SuppressionChange {
    /// The entry an opt-out change makes.
    pub fn entry(&self) -> Suppression {
        Suppression {
            phone: self.phone,
            source: self.source,
            reason: self.reason.clone(),
            client_id: self.client_id,
            caller: self.caller.clone(),
            created_at: self.at,
        }
    }

    /// `opt_out` or `opt_in`: how metrics and the log name its direction.
    pub fn direction(&self) -> &'static str {
        if self.suppressed { "opt_out" } else { "opt_in" }
    }
}

/// A change of the list, as an entry of the event log.
#[derive(Debug, Clone, PartialEq)]
pub struct SuppressionEvent {
    /// Position in the log, shared with status events.
    pub cursor: Cursor,
    /// The change.
    pub change: SuppressionChange,
}

/// A reply of a delivery report whose whole text is an opt-out or opt-in keyword.
#[derive(Debug, Clone, PartialEq)]
pub struct KeywordReply {
    /// Its position among the report's replies (they are processed in order).
    pub index: usize,
    /// True: an opt-out keyword; false: an opt-in one.
    pub opt_out: bool,
    /// The keyword as the recipient wrote it, trimmed.
    pub keyword: Reason,
}

impl KeywordReply {
    /// The time of this reply's decision: its own `datetime`, else the report's
    /// `updated`, else when msgw received the report (`received_at`); never later than
    /// that, so a clock ahead or a date in the future cannot outlast replies written
    /// after it. `None` when a time was given for it that msgw could not read.
    pub fn decided_at(
        &self,
        report: &DeliveryReport,
        received_at: DateTime<Utc>,
    ) -> Option<DateTime<Utc>> {
        let reply = report.replies.get(self.index);
        if reply.is_some_and(|r| r.time_unreadable) {
            return None;
        }
        Some(
            reply
                .and_then(|r| r.datetime)
                .or(report.updated)
                .unwrap_or(received_at)
                .min(received_at),
        )
    }

    /// Whether a time was given for this reply that msgw could not read.
    pub fn time_unreadable(&self, report: &DeliveryReport) -> bool {
        report
            .replies
            .get(self.index)
            .is_some_and(|r| r.time_unreadable)
    }

    /// What makes the change of this reply the same one when a report repeats it (a
    /// webhook sent again, a status poll that sees the same replies): the message, the
    /// reply's place and time, and its text.
    pub fn dedup_key(&self, report: &DeliveryReport) -> String {
        let message = match report.client_id {
            Some(id) => id.get().to_string(),
            None => format!("m:{}", report.msg_id.as_deref().unwrap_or_default()),
        };
        let datetime = report
            .replies
            .get(self.index)
            .and_then(|r| r.datetime)
            .map(|t| t.timestamp_millis().to_string())
            .unwrap_or_default();
        format!(
            "reply|{message}|{}|{datetime}|{}",
            self.index,
            self.keyword.as_str()
        )
    }
}

/// Whether `c` is punctuation a reply may end with after its keyword (`Stop.`,
/// `STOP!`, `stop?!`): ASCII punctuation and the ellipsis, full stop and marks of
/// other scripts.
fn trailing_mark(c: char) -> bool {
    c.is_ascii_punctuation() || matches!(c, '…' | '。' | '．' | '！' | '？' | '¡' | '¿')
}

/// A reply's text (or a keyword) as compared: surrounding whitespace and trailing
/// punctuation (with whitespace among it) removed.
fn bare(text: &str) -> &str {
    text.trim_start()
        .trim_end_matches(|c: char| c.is_whitespace() || trailing_mark(c))
}

/// The keywords a reply's whole text is compared with: opt-out ones (STOP, ...) and
/// opt-in ones (START, ...). The text is compared without its surrounding whitespace
/// and trailing punctuation, and without regard to case (Unicode's lower and upper case
/// mappings: `straße` matches `STRASSE`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Keywords {
    /// Opt-out keywords, each in lower and in upper case.
    opt_out: Vec<(String, String)>,
    /// Opt-in keywords, the same.
    opt_in: Vec<(String, String)>,
}

impl Keywords {
    /// The keywords of both lists (each trimmed; empty ones are skipped).
    pub fn new(opt_out: &[String], opt_in: &[String]) -> Self {
        let cased = |list: &[String]| {
            list.iter()
                .map(|k| bare(k))
                .filter(|k| !k.is_empty())
                .map(|k| (k.to_lowercase(), k.to_uppercase()))
                .collect()
        };
        Self {
            opt_out: cased(opt_out),
            opt_in: cased(opt_in),
        }
    }

    /// Whether `text`, bare of surrounding whitespace and trailing punctuation, is an
    /// opt-out keyword (`Some(true)`), an opt-in one (`Some(false)`), or neither.
    pub fn classify(&self, text: &str) -> Option<bool> {
        let text = bare(text);
        if text.is_empty() {
            return None;
        }
        let (lower, upper) = (text.to_lowercase(), text.to_uppercase());
        let is = |list: &[(String, String)]| list.iter().any(|(l, u)| *l == lower || *u == upper);
        if is(&self.opt_out) {
            Some(true)
        } else if is(&self.opt_in) {
            Some(false)
        } else {
            None
        }
    }

    /// The replies of a report whose text is a keyword, in order.
    pub fn replies_of(&self, report: &DeliveryReport) -> Vec<KeywordReply> {
        if self.opt_out.is_empty() && self.opt_in.is_empty() {
            return Vec::new();
        }
        report
            .replies
            .iter()
            .enumerate()
            .filter_map(|(index, reply)| {
                let text = reply.message.as_deref()?;
                let opt_out = self.classify(text)?;
                Some(KeywordReply {
                    index,
                    opt_out,
                    keyword: Reason::keyword(text.trim()),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_bounded_and_printable() {
        assert!(Reason::parse("").is_ok());
        assert!(Reason::parse(&"é".repeat(MAX_REASON_CHARS)).is_ok());
        assert!(Reason::parse(&"é".repeat(MAX_REASON_CHARS + 1)).is_err());
        assert!(Reason::parse("line\nbreak").is_err());
        assert_eq!(
            Reason::keyword(&"s".repeat(300)).as_str().len(),
            MAX_REASON_CHARS
        );
    }

    #[test]
    fn sources_read_back_by_name() {
        for s in [SuppressionSource::Reply, SuppressionSource::Api] {
            assert_eq!(SuppressionSource::from_name(s.as_str()), Some(s));
        }
        assert_eq!(SuppressionSource::from_name("webhook"), None);
    }

    fn keywords() -> Keywords {
        let list = |s: &str| s.split(',').map(str::to_owned).collect::<Vec<_>>();
        Keywords::new(
            &list("STOP,STOPALL,UNSUBSCRIBE,CANCEL,END,QUIT,STRASSE"),
            &list("START,UNSTOP"),
        )
    }

    #[test]
    fn keywords_match_the_whole_trimmed_text_in_any_case() {
        let k = keywords();
        for out in [
            "STOP",
            "stop",
            "  Stop\n",
            "\u{a0}QUIT\t",
            "unsubscribe",
            "straße",
            "Stop.",
            "STOP!",
            "stop ?!",
            "Stop…",
            " quit. \n",
        ] {
            assert_eq!(k.classify(out), Some(true), "{out:?}");
        }
        for back in ["START", " start ", "UnStop", "Start!"] {
            assert_eq!(k.classify(back), Some(false), "{back:?}");
        }
        for neither in [
            "",
            "   ",
            "STOP please",
            "stopp",
            "S T O P",
            "STARTED",
            "ЅТОР",
            "...STOP",
            "STOP. Thanks",
            "ST.OP",
            "!",
        ] {
            assert_eq!(k.classify(neither), None, "{neither:?}");
        }
    }

    #[test]
    fn only_text_replies_that_are_keywords_count_in_order() {
        use crate::core::domain::{Media, Reply};
        let reply = |m: Option<&str>| Reply {
            datetime: None,
            time_unreadable: false,
            message: m.map(str::to_owned),
            media: None,
        };
        let report = DeliveryReport {
            client_id: ClientId::new(5).ok(),
            msg_id: None,
            channel_raw: None,
            status: None,
            success: true,
            error: None,
            updated: None,
            reply: None,
            duration_secs: None,
            request_id: None,
            replies: vec![
                reply(Some("hello")),
                reply(Some(" Stop ")),
                Reply {
                    media: Some(Media {
                        url: "https://example.org/a.png".into(),
                        filename: "a.png".into(),
                        filesize: 1,
                    }),
                    ..reply(None)
                },
                reply(Some("start")),
            ],
        };
        let found = keywords().replies_of(&report);
        let summary: Vec<(usize, bool, &str)> = found
            .iter()
            .map(|k| (k.index, k.opt_out, k.keyword.as_str()))
            .collect();
        assert_eq!(summary, [(1, true, "Stop"), (3, false, "start")]);
        assert_ne!(found[0].dedup_key(&report), found[1].dedup_key(&report));
        assert!(Keywords::new(&[], &[]).replies_of(&report).is_empty());
    }
}
