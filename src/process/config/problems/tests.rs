//! Each problem in one line naming the variable, the flag, the value and an example;
//! every bad value of a command line at once.

use super::*;

fn argv(args: &[&str]) -> Vec<OsString> {
    ["msgw", "serve"]
        .iter()
        .chain(args)
        .map(OsString::from)
        .collect()
}

fn lines(args: &[&str]) -> Vec<String> {
    let (cli, problems) = parse(argv(args)).expect("explained");
    let mut problems = problems;
    if let Some(Cli {
        command: crate::process::cli::Command::Serve(serve),
    }) = cli
        && let Err(error) = serve.into_config()
    {
        problems.extend(error.downcast::<Problems>().expect("problems").0);
    }
    Problems(problems).lines()
}

#[test]
fn a_bad_value_names_variable_flag_value_and_an_example_in_one_line() {
    let lines = lines(&["--upstream-timeout", "banana"]);
    assert_eq!(
        lines,
        [
            "MSGW_UPSTREAM_TIMEOUT (--upstream-timeout) is \"banana\": not a duration: expected a number and a unit (ms, s, m, h, d); e.g. MSGW_UPSTREAM_TIMEOUT=10s"
        ]
    );
}

#[test]
fn every_bad_value_is_reported_with_the_checks_that_follow_parsing() {
    let lines = lines(&[
        "--upstream-timeout=banana",
        "--log-format",
        "xml",
        "--upstream-connections",
        "0",
        "--store-url",
        "postgres://msgw@db/msgw",
    ]);
    let expected = [
        "MSGW_UPSTREAM_TIMEOUT",
        "MSGW_LOG_FORMAT (--log-format) is \"xml\": expected one of text, json; e.g. MSGW_LOG_FORMAT=text",
        "MSGW_UPSTREAM_CONNECTIONS (--upstream-connections) is \"0\": must be between 1 and 1024; e.g. MSGW_UPSTREAM_CONNECTIONS=8",
        "MSGW_WEBHOOK_SECRET (--webhook-secret) is not set",
        "MSGW_ACCOUNT_TOKEN (--account-token) is not set",
        "MSGW_VERIFY_SECRET (--verify-secret) is not set",
    ];
    assert_eq!(lines.len(), expected.len(), "{lines:#?}");
    for (line, start) in lines.iter().zip(expected) {
        assert!(line.starts_with(start), "{line}");
        assert!(!line.contains('\n'), "{line}");
    }
}

#[test]
fn secrets_are_never_shown() {
    let lines = lines(&["--webhook-secret", "hunter2-short"]);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("is set (13 characters, not shown)"),
        "{}",
        lines[0]
    );
    assert!(!lines[0].contains("hunter2"), "{}", lines[0]);
}

#[test]
fn two_options_for_one_setting_are_named_together() {
    let lines = lines(&["--api-key", "k", "--api-key-file", "/nonexistent/key"]);
    assert!(
        lines[0].starts_with(
            "MSGW_API_KEY (--api-key) is set: so is MSGW_API_KEY_FILE (--api-key-file)"
        ),
        "{lines:?}"
    );
}

#[test]
fn a_busy_port_names_its_variable_and_a_free_looking_one() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = ListenAddr::from(taken.local_addr().unwrap());
    let error = crate::transport::listen::Listeners::bind(&addr)
        .map(|_| ())
        .unwrap_err();
    let line = Problems(vec![Problem::listen("grpc_addr", &addr, &error)])
        .lines()
        .remove(0);
    let port = taken.local_addr().unwrap().port();
    assert!(
        line.starts_with(&format!("MSGW_GRPC_ADDR (--grpc-addr) is \"127.0.0.1:{port}\": cannot listen there: the port is in use")),
        "{line}"
    );
    assert!(
        line.ends_with(&format!("e.g. MSGW_GRPC_ADDR=127.0.0.1:{}", port + 1)),
        "{line}"
    );
}

#[test]
fn help_and_unknown_flags_stay_clap_s_own() {
    assert!(parse(argv(&["--help"])).is_err());
    assert!(parse(argv(&["--no-such-flag"])).is_err());
}
