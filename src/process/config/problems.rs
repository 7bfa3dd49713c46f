//! Configuration problems, each said in one line that tells what to change: the
//! environment variable and its flag, the value given, what is wrong with it and a
//! valid example. A start reports every problem it finds at once, not the first one.
//!
//! The one place that turns clap's parse errors ([`parse`]) and the checks of
//! `config/` ([`Problem`]) into those lines: the names, hidden values and defaults come
//! from the clap definitions of `cli.rs`, so a new option gets its line for free.

use std::ffi::OsString;
use std::fmt;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Arg, Command, CommandFactory, FromArgMatches, Parser};

use crate::process::cli::Cli;
use crate::transport::listen::ListenAddr;

/// Examples for options that have no default to show instead, by [`name_of`].
const EXAMPLES: &[(&str, &str)] = &[
    ("upstream_url", "https://gateway.example.com"),
    ("api_key_file", "/run/secrets/msgw/api-key"),
    ("public_url", "https://msgw-hooks.example.com"),
    ("webhook_secret", "$(openssl rand -base64 32)"),
    (
        "webhook_secret_previous",
        "<the secret before the rotation>",
    ),
    ("account_token", "$(openssl rand -hex 24)"),
    ("verify_secret", "$(openssl rand -base64 32)"),
    ("verify_allowed_prefixes", "380,48"),
    ("grpc_max_connections", "10000"),
    ("grpc_memory_budget", "64MiB"),
    ("worker_threads", "2"),
    ("from", "sqlite://msgw.db"),
    ("to", "postgres://msgw@db.example.com/msgw"),
];

/// What was given for the option a problem is about.
#[derive(Debug, Clone)]
enum Given {
    /// This value.
    Value(String),
    /// A secret of this many characters (never shown).
    Secret(usize),
    /// Something (what does not matter).
    Set,
    /// Nothing.
    Unset,
}

/// One thing wrong with the configuration.
#[derive(Debug, Clone)]
pub struct Problem {
    /// The subcommand the option belongs to (`serve`, `sandbox`, ...).
    command: &'static str,
    /// The option: its [`name_of`] (`upstream_timeout`) or clap's id of it.
    arg: String,
    given: Given,
    why: String,
    example: Option<String>,
}

impl Problem {
    /// `msgw serve`'s option `arg` (its [`name_of`]) has `value`, which is wrong for `why`.
    pub fn value(arg: &str, value: impl fmt::Display, why: impl Into<String>) -> Self {
        Self {
            command: "serve",
            arg: arg.to_owned(),
            given: Given::Value(value.to_string()),
            why: why.into(),
            example: None,
        }
    }

    /// The secret option `arg` is set (to something of `len` characters) but wrong.
    pub fn secret(arg: &str, len: usize, why: impl Into<String>) -> Self {
        Self {
            given: Given::Secret(len),
            ..Self::value(arg, "", why)
        }
    }

    /// The option `arg` is not set but must be, for `why`.
    pub fn unset(arg: &str, why: impl Into<String>) -> Self {
        Self {
            given: Given::Unset,
            ..Self::value(arg, "", why)
        }
    }

    /// msgw cannot listen on `addr`, the value of `arg`.
    pub fn listen(arg: &str, addr: &ListenAddr, error: &std::io::Error) -> Self {
        let given = addr.to_string();
        let (why, example) = if error.kind() == std::io::ErrorKind::AddrInUse {
            let next = given.rsplit_once(':').and_then(|(host, port)| {
                Some(format!(
                    "{host}:{}",
                    port.parse::<u16>().ok()?.checked_add(1)?
                ))
            });
            ("cannot listen there: the port is in use (another msgw, or another program, listens on it)".to_owned(), next)
        } else {
            (format!("cannot listen there: {error}"), None)
        };
        let problem = Self::value(arg, given, why);
        match example {
            Some(example) => problem.example(example),
            None => problem,
        }
    }

    /// A valid value to show (instead of the option's default).
    pub fn example(mut self, example: impl Into<String>) -> Self {
        self.example = Some(example.into());
        self
    }

    /// The problem is about an option of the subcommand `command`, not of `serve`.
    pub fn for_command(mut self, command: &'static str) -> Self {
        self.command = command;
        self
    }

    /// The line that says it all.
    fn line(&self, cli: &Command) -> String {
        let command = cli.find_subcommand(self.command).unwrap_or(cli);
        let arg = command
            .get_arguments()
            .find(|a| a.get_id().as_str() == self.arg || name_of(a) == self.arg);
        let (name, example_prefix) = match arg {
            Some(arg) => names(arg),
            None => (self.arg.clone(), format!("{}=", self.arg)),
        };
        let hidden = arg.is_some_and(Arg::is_hide_env_values_set);
        let given = match &self.given {
            Given::Value(v) if hidden => hidden_length(v.chars().count()),
            Given::Value(v) => format!("is {v:?}"),
            Given::Secret(len) => hidden_length(*len),
            Given::Set => "is set".to_owned(),
            Given::Unset => "is not set".to_owned(),
        };
        let example = self
            .example
            .clone()
            .or_else(|| {
                arg.and_then(|a| a.get_default_values().first())
                    .map(|d| d.to_string_lossy().into_owned())
                    .filter(|d| !d.is_empty() && !matches!(&self.given, Given::Value(v) if v == d))
            })
            .or_else(|| {
                let key = arg.map_or_else(|| self.arg.clone(), name_of);
                EXAMPLES
                    .iter()
                    .find(|(id, _)| *id == key)
                    .map(|(_, e)| (*e).to_owned())
            })
            .filter(|e| !e.is_empty());
        match example {
            Some(example) => format!(
                "{name} {given}: {}; e.g. {example_prefix}{example}",
                self.why
            ),
            None => format!("{name} {given}: {}", self.why),
        }
    }
}

/// How config/ names an option: its flag with `_` for `-` (`upstream_timeout`), whatever
/// field of which settings struct declares it.
pub fn name_of(arg: &Arg) -> String {
    arg.get_long()
        .map_or_else(|| arg.get_id().to_string(), |l| l.replace('-', "_"))
}

/// `MSGW_X (--x)` and the prefix of an example (`MSGW_X=`), or `--x` and `--x ` for
/// an option without a variable.
fn names(arg: &Arg) -> (String, String) {
    let flag = arg
        .get_long()
        .map_or_else(|| arg.get_id().to_string(), |l| format!("--{l}"));
    match arg.get_env() {
        Some(env) => {
            let env = env.to_string_lossy();
            (format!("{env} ({flag})"), format!("{env}="))
        }
        None => (flag.clone(), format!("{flag} ")),
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.line(&Cli::command()))
    }
}

impl std::error::Error for Problem {}

/// Every problem a start found; one line each.
#[derive(Debug)]
pub struct Problems(pub Vec<Problem>);

impl Problems {
    /// `Err` with these problems, unless there are none.
    pub fn check(problems: Vec<Problem>) -> Result<(), Self> {
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Self(problems))
        }
    }

    /// One line per problem.
    pub fn lines(&self) -> Vec<String> {
        let cli = Cli::command();
        self.0.iter().map(|p| p.line(&cli)).collect()
    }
}

impl fmt::Display for Problems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.lines().join("\n"))
    }
}

impl std::error::Error for Problems {}

/// The command line `argv` parsed: every bad value is a [`Problem`] (all of them, not
/// the first one clap meets), and the option falls back to its default so that parsing
/// and `serve`'s own checks go on and find the rest. `Err`: what clap says itself
/// (help, version, an unknown flag).
pub fn parse(argv: Vec<OsString>) -> Result<(Option<Cli>, Vec<Problem>), clap::Error> {
    let fresh = Cli::command();
    let mut argv = argv;
    let mut problems = Vec::new();
    let Some(name) = argv
        .iter()
        .skip(1)
        .filter_map(|a| a.to_str())
        .find_map(|a| {
            fresh
                .get_subcommands()
                .find(|s| s.get_name() == a)
                .map(|s| s.get_name().to_owned())
        })
    else {
        return Cli::try_parse_from(argv).map(|cli| (Some(cli), problems));
    };
    let command = fresh.find_subcommand(&name).expect("found above").clone();
    // Options taken out: clap's variable lookup turned off (and the flag dropped from
    // `argv`), so parsing sees their default. A built command cannot be changed safely,
    // so each round starts from a fresh one.
    let mut taken: Vec<String> = Vec::new();
    for _ in 0..=command.get_arguments().count() {
        let cli = taken.iter().fold(Cli::command(), |cli, arg| {
            cli.mut_subcommand(&name, |s| s.mut_arg(arg, |a| a.env(None::<&str>)))
        });
        let error = match cli.try_get_matches_from(argv.iter()) {
            Ok(matches) => return Ok((Some(Cli::from_arg_matches(&matches)?), problems)),
            Err(error) => error,
        };
        let Some((found, arg)) = explain(&error, &command) else {
            return if problems.is_empty() {
                Err(error)
            } else {
                Ok((None, problems))
            };
        };
        problems.extend(found);
        let Some(arg) = arg.filter(|a| !taken.contains(a)) else {
            return Ok((None, problems));
        };
        if let Some(long) = command
            .get_arguments()
            .find(|a| a.get_id() == arg.as_str())
            .and_then(Arg::get_long)
        {
            drop_flag(&mut argv, &format!("--{long}"));
        }
        taken.push(arg);
    }
    Ok((None, problems))
}

/// The problems clap's `error` is about (one per option it names), and the option to
/// take out before parsing again (`None`: parsing cannot go on).
fn explain(error: &clap::Error, command: &Command) -> Option<(Vec<Problem>, Option<String>)> {
    let string = |kind| match error.get(kind) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        Some(ContextValue::Strings(s)) => s.first().cloned(),
        _ => None,
    };
    // clap names an option as `--flag <VALUE>`.
    let arg_of = |text: &str| {
        let flag = text.split_whitespace().next()?.trim_start_matches('-');
        command
            .get_arguments()
            .find(|a| a.get_long() == Some(flag))
            .map(|a| a.get_id().to_string())
    };
    let arg = arg_of(&string(ContextKind::InvalidArg)?)?;
    let name: &'static str = static_name(command.get_name());
    let problems = match error.kind() {
        ErrorKind::MissingRequiredArgument => {
            let missing = match error.get(ContextKind::InvalidArg) {
                Some(ContextValue::Strings(all)) => all.clone(),
                _ => Vec::new(),
            };
            missing
                .iter()
                .filter_map(|text| arg_of(text))
                .map(|arg| {
                    Problem::unset(&arg, "an option that is set needs it too (see msgw --help)")
                        .for_command(name)
                })
                .collect()
        }
        ErrorKind::ValueValidation | ErrorKind::InvalidValue => {
            let value = string(ContextKind::InvalidValue).unwrap_or_default();
            let why = match (error.kind(), error.get(ContextKind::ValidValue)) {
                (ErrorKind::InvalidValue, Some(ContextValue::Strings(valid))) => {
                    format!("expected one of {}", valid.join(", "))
                }
                _ => std::error::Error::source(error)
                    .map_or_else(|| "not a valid value".to_owned(), |s| s.to_string()),
            };
            vec![Problem::value(&arg, value, why).for_command(name)]
        }
        ErrorKind::ArgumentConflict => {
            let other = string(ContextKind::PriorArg)
                .and_then(|p| arg_of(&p))
                .and_then(|id| command.get_arguments().find(|a| a.get_id() == id.as_str()))
                .map_or_else(|| "another option".to_owned(), |a| names(a).0);
            vec![
                Problem {
                    given: Given::Set,
                    ..Problem::value(&arg, "", format!("so is {other}: set only one of them"))
                }
                .example("")
                .for_command(name),
            ]
        }
        _ => return None,
    };
    let go_on = matches!(
        error.kind(),
        ErrorKind::ValueValidation | ErrorKind::InvalidValue | ErrorKind::ArgumentConflict
    );
    Some((problems, go_on.then_some(arg)))
}

/// The subcommand's name as the `'static` a [`Problem`] holds (one of `cli.rs`'s).
fn static_name(name: &str) -> &'static str {
    ["serve", "sandbox", "copy-store", "check"]
        .into_iter()
        .find(|n| *n == name)
        .unwrap_or("serve")
}

/// Removes `--flag VALUE` and `--flag=VALUE` from `argv`.
fn drop_flag(argv: &mut Vec<OsString>, flag: &str) {
    let with_value = format!("{flag}=");
    let mut i = 0;
    while i < argv.len() {
        let a = argv[i].to_string_lossy();
        if a == flag {
            let value = argv
                .get(i + 1)
                .is_some_and(|v| !v.to_string_lossy().starts_with('-'));
            argv.drain(i..i + 1 + usize::from(value));
        } else if a.starts_with(&with_value) {
            argv.remove(i);
        } else {
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests;

/// How a hidden value is shown: its length only.
fn hidden_length(len: usize) -> String {
    let s = if len == 1 { "" } else { "s" };
    format!("is set ({len} character{s}, not shown)")
}
