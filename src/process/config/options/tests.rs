//! The flags as `msgw options` describes them, and the docs held to them: a row of
//! docs/configuration.md for every option with its flag and default, and no `MSGW_*`
//! in the docs or the chart that msgw does not read.

use std::collections::BTreeSet;
use std::path::Path;

use super::*;

/// Variables the docs name that are no option: read at build time (`MSGW_REVISION`)
/// or by the tests (`MSGW_TEST_POSTGRES_URL`).
const NOT_OPTIONS: &[&str] = &["MSGW_REVISION", "MSGW_TEST_POSTGRES_URL"];

/// Variables in docs/configuration.md's table that no flag declares: the OpenTelemetry
/// SDK reads them itself.
const READ_BY_LIBRARIES: &[&str] = &["OTEL_EXPORTER_OTLP_ENDPOINT"];

fn repo_file(path: &Path) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn option(name: &str) -> Described {
    serve()
        .into_iter()
        .find(|o| o.name == name)
        .unwrap_or_else(|| panic!("no option {name}"))
}

/// A row of docs/configuration.md's table: its variables (`MSGW_X`, `_FILE` read as
/// `MSGW_X_FILE`), its flags, and its default column.
struct Row {
    variables: Vec<String>,
    flags: Vec<String>,
    default: String,
}

/// What is between backticks in `cell`.
fn spans(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

fn rows() -> Vec<Row> {
    repo_file(Path::new("docs/configuration.md"))
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|line| {
            let cells: Vec<&str> = line.trim().trim_matches('|').split('|').collect();
            assert_eq!(cells.len(), 4, "a row of four columns: {line}");
            let mut variables: Vec<String> = Vec::new();
            for span in spans(cells[0]) {
                let full = match (span.starts_with('_'), variables.first()) {
                    (true, Some(first)) => format!("{first}{span}"),
                    _ => span,
                };
                variables.push(full);
            }
            Row {
                variables,
                flags: spans(cells[1]),
                default: cells[3].to_owned(),
            }
        })
        .collect()
}

#[test]
fn docs_configuration_has_a_row_for_every_option_with_its_flag_and_default() {
    let rows = rows();
    let options = serve();
    let mut wrong = Vec::new();
    for o in &options {
        let Some(env) = &o.env else {
            wrong.push(format!("{} has no environment variable", o.flag));
            continue;
        };
        let Some(row) = rows.iter().find(|r| r.variables.contains(env)) else {
            wrong.push(format!("{env} ({}) has no row", o.flag));
            continue;
        };
        if !row.flags.contains(&o.flag) {
            wrong.push(format!("{env}: its row does not name {}", o.flag));
        }
        if let Some(default) = o.default.as_deref().filter(|d| !d.is_empty())
            && !row.default.contains(&format!("`{default}`"))
        {
            wrong.push(format!(
                "{env}: the default column says {:?}, the flag `{default}`",
                row.default.trim()
            ));
        }
    }
    let envs: BTreeSet<&str> = options.iter().filter_map(|o| o.env.as_deref()).collect();
    let flags: BTreeSet<&str> = options.iter().map(|o| o.flag.as_str()).collect();
    for row in &rows {
        for v in &row.variables {
            if !envs.contains(v.as_str()) && !READ_BY_LIBRARIES.contains(&v.as_str()) {
                wrong.push(format!("{v} is in the table but no option of msgw serve"));
            }
        }
        for f in &row.flags {
            if !flags.contains(f.as_str()) {
                wrong.push(format!("{f} is in the table but no flag of msgw serve"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/configuration.md and the flags differ:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn every_msgw_variable_the_docs_the_chart_and_compose_name_is_one_msgw_reads() {
    let read = variables();
    let mut files = vec![
        "README.md".into(),
        "helm/msgw/README.md".into(),
        "helm/msgw/values.yaml".into(),
        "helm/msgw/values.schema.json".into(),
        "compose.yaml".into(),
        "Dockerfile".into(),
    ];
    for dir in ["docs", "helm/msgw/templates"] {
        let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
        for entry in std::fs::read_dir(full).expect("dir") {
            let path = entry.expect("entry").path();
            let text = ["md", "yaml", "tpl", "txt", "json"]
                .iter()
                .any(|e| path.extension().is_some_and(|x| x == *e));
            if text {
                files.push(Path::new(dir).join(path.file_name().expect("name")));
            }
        }
    }
    let mut unknown = BTreeSet::new();
    for file in &files {
        let text = repo_file(file);
        for (at, _) in text.match_indices("MSGW_") {
            let name: String = text[at..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            let wildcard = text[at + name.len()..].starts_with('*');
            if name == "MSGW_" {
                // A template building the name from a value's key.
                continue;
            }
            let known = NOT_OPTIONS.contains(&name.as_str())
                || if wildcard {
                    read.iter().any(|v| v.starts_with(&name))
                } else {
                    read.contains(&name)
                };
            if !known {
                unknown.insert(format!("{}: {name}", file.display()));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "named but read by no option (renamed or removed?): {unknown:#?}"
    );
}

#[test]
fn the_listing_reads_bounds_kinds_and_values_from_the_flags() {
    let connections = option("upstream_connections");
    assert_eq!(
        (connections.kind, connections.min, connections.max),
        ("integer", Some(1.into()), Some(1024.into()))
    );
    assert_eq!(
        connections.env.as_deref(),
        Some("MSGW_UPSTREAM_CONNECTIONS")
    );
    assert_eq!(connections.default.as_deref(), Some("8"));
    let phone = option("verify_phone_limit");
    assert_eq!((phone.min, phone.max), (Some(1.into()), None));
    let digits = option("verify_guard_prefix_digits");
    assert_eq!((digits.min, digits.max), (Some(2.into()), Some(12.into())));
    let conversion = option("verify_guard_min_conversion");
    assert_eq!(conversion.kind, "number");
    assert_eq!(
        (conversion.min, conversion.max),
        (Some(0.0.into()), Some(1.0.into()))
    );
    assert_eq!(option("verify_fraud_guard").values, ["on", "shadow", "off"]);
    assert_eq!(option("grpc_memory_budget").kind, "size");
    assert_eq!(option("grpc_max_connections").default, None);
    assert_eq!(option("upstream_timeout").kind, "duration");
    assert_eq!(option("allow_unauthenticated").kind, "bool");
    assert!(option("api_key").secret && !option("api_key_file").secret);
    assert!(
        option("upstream_connections")
            .help
            .starts_with("Gateway requests in flight")
    );
    assert!(json().contains("\"MSGW_VERIFY_GUARD_HOLD\""));
}

#[test]
fn every_option_has_a_default_or_is_optional() {
    // What the settings structs' `Default` impls rely on.
    let _: crate::process::cli::ServeArgs = crate::base::parse::defaults();
    assert!(crate::process::config::Config::serve_defaults().is_ok());
}
