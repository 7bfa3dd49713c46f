//! Every option of `msgw serve` as its flag states it: name, variable, default, kind,
//! bounds and help, read from clap's definitions (nothing here is written twice).
//! `msgw options` prints them as JSON for `.ci/chart-check`, which holds the Helm
//! chart's values, schema and environment to them; this module's tests hold
//! docs/configuration.md and every `MSGW_*` the docs name to them.

use std::{any::TypeId, path::PathBuf, time::Duration};

use clap::{Arg, ArgAction, Command, CommandFactory};
use serde::Serialize;
use serde_json::Value;

use crate::process::cli::Cli;
use crate::transport::listen::ListenAddr;

/// One option of `msgw serve`.
#[derive(Debug, Clone, Serialize)]
pub struct Described {
    /// How config/ and problem lines name it: the flag with `_` (`upstream_timeout`).
    pub name: String,
    /// `--upstream-timeout`.
    pub flag: String,
    /// `MSGW_UPSTREAM_TIMEOUT`.
    pub env: Option<String>,
    /// The default as written on the flag; `None`: unset unless given.
    pub default: Option<String>,
    /// `duration`, `integer`, `number`, `size`, `bool`, `enum`, `file`, `url`,
    /// `address` or `text`.
    pub kind: &'static str,
    /// The values an `enum` takes.
    pub values: Vec<String>,
    /// The least and the greatest value an `integer` or `number` takes, as its
    /// parser accepts them; `None`: only its type bounds it.
    pub min: Option<Value>,
    /// See `min`.
    pub max: Option<Value>,
    /// Its value is a secret: never shown.
    pub secret: bool,
    /// The help of `msgw serve --help`.
    pub help: String,
}

/// `msgw serve`'s options, in `--help`'s order.
pub fn serve() -> Vec<Described> {
    let cli = Cli::command();
    let serve = cli.find_subcommand("serve").expect("msgw serve");
    serve
        .get_arguments()
        .filter(|a| !matches!(a.get_id().as_str(), "help" | "version"))
        .map(describe)
        .collect()
}

/// Every variable any subcommand reads (`serve`, `sandbox`, `copy-store`, `guard`, ...).
pub fn variables() -> Vec<String> {
    let cli = Cli::command();
    let mut all: Vec<String> = cli
        .get_subcommands()
        .flat_map(|c| {
            c.get_arguments()
                .chain(c.get_subcommands().flat_map(Command::get_arguments))
        })
        .filter_map(|a| a.get_env().map(|e| e.to_string_lossy().into_owned()))
        .collect();
    all.sort();
    all.dedup();
    all
}

/// [`serve`] as pretty JSON: what `msgw options` prints.
pub fn json() -> String {
    serde_json::to_string_pretty(&serve()).expect("options serialize")
}

fn describe(arg: &Arg) -> Described {
    let parser = arg.get_value_parser();
    let id = parser.type_id();
    let is = |t: TypeId| id == t;
    let integers = [
        (TypeId::of::<u16>(), u128::from(u16::MAX)),
        (TypeId::of::<u32>(), u128::from(u32::MAX)),
        (TypeId::of::<u64>(), u128::from(u64::MAX)),
        (TypeId::of::<usize>(), usize::MAX as u128),
    ];
    let values: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|_| !is(TypeId::of::<bool>()))
        .map(|v| v.get_name().to_owned())
        .collect();
    let default = arg
        .get_default_values()
        .first()
        .map(|d| d.to_string_lossy().into_owned());
    let integer = integers.iter().find(|(t, _)| is(*t)).map(|(_, max)| *max);
    let kind = if !values.is_empty() {
        "enum"
    } else if is(TypeId::of::<Duration>()) {
        "duration"
    } else if is(TypeId::of::<bool>()) || matches!(arg.get_action(), ArgAction::SetTrue) {
        "bool"
    } else if is(TypeId::of::<f64>()) {
        "number"
    } else if integer.is_some() && accepts(arg, "64MiB") {
        "size"
    } else if integer.is_some() {
        "integer"
    } else if is(TypeId::of::<PathBuf>()) {
        "file"
    } else if is(TypeId::of::<url::Url>()) {
        "url"
    } else if is(TypeId::of::<ListenAddr>()) {
        "address"
    } else {
        "text"
    };
    let (min, max) = match (kind, integer) {
        ("integer", Some(type_max)) => {
            let (min, max) = integer_bounds(arg, default.as_deref());
            (
                min.map(Value::from),
                max.filter(|m| *m < type_max).map(|m| Value::from(m as u64)),
            )
        }
        ("number", _) => number_bounds(arg, default.as_deref()),
        _ => (None, None),
    };
    Described {
        name: super::problems::name_of(arg),
        flag: arg
            .get_long()
            .map_or_else(|| arg.get_id().to_string(), |l| format!("--{l}")),
        env: arg.get_env().map(|e| e.to_string_lossy().into_owned()),
        default,
        kind,
        values,
        min,
        max,
        secret: arg.is_hide_env_values_set(),
        help: arg
            .get_long_help()
            .or(arg.get_help())
            .map(ToString::to_string)
            .unwrap_or_default(),
    }
}

/// Whether `arg`'s parser takes `value`.
fn accepts(arg: &Arg, value: &str) -> bool {
    let probe = Command::new("probe").arg(
        Arg::new("value")
            .long("value")
            .action(ArgAction::Set)
            .value_parser(arg.get_value_parser().clone()),
    );
    probe
        .try_get_matches_from(["probe", "--value", value])
        .is_ok()
}

/// A value the parser of `arg` takes, to search its bounds from.
fn start(arg: &Arg, default: Option<&str>, candidates: &[&str]) -> Option<String> {
    default
        .into_iter()
        .chain(candidates.iter().copied())
        .find(|v| accepts(arg, v))
        .map(str::to_owned)
}

/// The least and greatest whole numbers `arg` takes (`None`: beyond what is searched).
fn integer_bounds(arg: &Arg, default: Option<&str>) -> (Option<i128>, Option<u128>) {
    let Some(from) = start(arg, default, &["1", "0", "16", "1000"]).and_then(|s| s.parse().ok())
    else {
        return (None, None);
    };
    let ok = |n: i128| accepts(arg, &n.to_string());
    // The least: the first taken between a low refused one and `from`.
    let low = -(1i128 << 64);
    let min = (!ok(low)).then(|| {
        let (mut refused, mut taken) = (low, from);
        while taken - refused > 1 {
            let mid = refused + (taken - refused) / 2;
            if ok(mid) { taken = mid } else { refused = mid }
        }
        taken
    });
    let high = 1i128 << 65;
    let max = (!ok(high)).then(|| {
        let (mut taken, mut refused) = (from, high);
        while refused - taken > 1 {
            let mid = taken + (refused - taken) / 2;
            if ok(mid) { taken = mid } else { refused = mid }
        }
        taken as u128
    });
    (min, max)
}

/// The least and greatest numbers `arg` takes, to a millionth.
fn number_bounds(arg: &Arg, default: Option<&str>) -> (Option<Value>, Option<Value>) {
    let Some(from) = start(arg, default, &["0", "1"]).and_then(|s| s.parse::<f64>().ok()) else {
        return (None, None);
    };
    let ok = |x: f64| accepts(arg, &x.to_string());
    let search = |far: f64| {
        (!ok(far)).then(|| {
            let (mut taken, mut refused) = (from, far);
            for _ in 0..200 {
                let mid = (taken + refused) / 2.0;
                if ok(mid) { taken = mid } else { refused = mid }
            }
            Value::from((taken * 1e6).round() / 1e6)
        })
    };
    (search(-1e12), search(1e12))
}

#[cfg(test)]
mod tests;
