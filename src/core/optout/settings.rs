//! Which replies opt a number out or back in: `msgw serve`'s `--opt-out-keywords` and
//! `--opt-in-keywords`, declared and checked here.

use crate::base::parse;
use crate::core::domain::Keywords;

/// Longest keyword, in characters.
const MAX_KEYWORD_CHARS: usize = 64;
/// Keywords in one list at most.
const MAX_KEYWORDS: usize = 50;

/// The opt-out and opt-in keywords.
#[derive(Debug, Clone, PartialEq, clap::Args)]
#[group(id = "opt_out")]
pub struct Settings {
    /// Replies that opt the number out (its later sends are refused with
    /// RECIPIENT_OPTED_OUT), comma-separated; the reply's whole text, trimmed, is
    /// compared without regard to case. Empty: replies opt nobody out.
    #[arg(long = "opt-out-keywords", env = "MSGW_OPT_OUT_KEYWORDS", default_value = "STOP,STOPALL,UNSUBSCRIBE,CANCEL,END,QUIT", value_parser = keywords)]
    pub opt_out_keywords: ::std::vec::Vec<String>,
    /// Replies that opt a suppressed number back in, comma-separated, compared as the
    /// opt-out keywords are. Empty: only SuppressionService lifts an opt-out.
    #[arg(long = "opt-in-keywords", env = "MSGW_OPT_IN_KEYWORDS", default_value = "START,UNSTOP", value_parser = keywords)]
    pub opt_in_keywords: ::std::vec::Vec<String>,
}

impl Default for Settings {
    fn default() -> Self {
        parse::defaults()
    }
}

impl Settings {
    /// The keywords as replies are compared with them.
    pub fn keywords(&self) -> Keywords {
        Keywords::new(&self.opt_out_keywords, &self.opt_in_keywords)
    }

    /// The keywords both lists name (a reply cannot both opt out and opt in), as
    /// `msgw serve` refuses them; empty when the lists are apart.
    pub fn overlap(&self) -> Vec<String> {
        let both = Keywords::new(&self.opt_in_keywords, &[]);
        self.opt_out_keywords
            .iter()
            .filter(|k| both.classify(k) == Some(true))
            .cloned()
            .collect()
    }
}

/// Keywords, comma-separated: each trimmed, 1 to 64 characters without control
/// characters or commas; blanks between commas are skipped.
fn keywords(value: &str) -> Result<Vec<String>, String> {
    let list: Vec<String> = value
        .split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(|k| {
            if k.chars().count() > MAX_KEYWORD_CHARS {
                return Err(format!(
                    "{k:?} is longer than {MAX_KEYWORD_CHARS} characters"
                ));
            }
            if k.chars().any(char::is_control) {
                return Err(format!("{k:?} contains a control character"));
            }
            Ok(k.to_owned())
        })
        .collect::<Result<_, _>>()?;
    if list.len() > MAX_KEYWORDS {
        return Err(format!("{} keywords: at most {MAX_KEYWORDS}", list.len()));
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_usual_keywords() {
        let s = Settings::default();
        assert_eq!(
            s.opt_out_keywords,
            ["STOP", "STOPALL", "UNSUBSCRIBE", "CANCEL", "END", "QUIT"]
        );
        assert_eq!(s.opt_in_keywords, ["START", "UNSTOP"]);
        assert!(s.overlap().is_empty());
        assert_eq!(s.keywords().classify(" stop "), Some(true));
    }

    #[test]
    fn keyword_lists_are_checked() {
        assert_eq!(keywords(" stop , ARRÊT ,,").unwrap(), ["stop", "ARRÊT"]);
        assert_eq!(keywords("").unwrap(), Vec::<String>::new());
        assert!(keywords(&"x".repeat(65)).is_err());
        assert!(keywords("a\u{7}b").is_err());
        assert!(keywords(&vec!["k"; 51].join(",")).is_err());
    }

    #[test]
    fn a_keyword_in_both_lists_is_found() {
        let s = Settings {
            opt_out_keywords: vec!["STOP".into(), "Halt".into()],
            opt_in_keywords: vec!["halt".into()],
        };
        assert_eq!(s.overlap(), ["Halt"]);
    }
}
