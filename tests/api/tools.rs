//! Third-party clients against the real server: grpcurl 1.8.6 (reflection v1alpha only).

use std::path::PathBuf;

use serde_json::Value;
use tokio::process::Command;

use crate::helpers::{TestApp, spawn_app};

pub fn grpcurl() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".tools/venv/bin/grpcurl");
    assert!(
        path.exists(),
        "grpcurl is not installed: run .ci/install-tools (the README's test command does)"
    );
    path
}

/// `PATH` with grpcurl's folder first: what the docs' shell blocks run with.
pub fn path_with_grpcurl() -> String {
    format!(
        "{}:{}",
        grpcurl().parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// A shell block of the docs, verbatim but for msgw's address, with grpcurl on the
/// PATH: its output, once it succeeded.
async fn run_doc_script(app: &TestApp, script: &str) -> String {
    let script = script.replace("localhost:50051", &app.addr.to_string());
    let path = path_with_grpcurl();
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .env("PATH", path)
        .output()
        .await
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// `grpcurl -plaintext <flags> <msgw address> <command>`.
async fn run(app: &TestApp, flags: &[&str], command: &[&str]) -> String {
    let args = [flags, command].concat();
    let out = Command::new(grpcurl())
        .arg("-plaintext")
        .args(flags)
        .arg(app.addr.to_string())
        .args(command)
        .output()
        .await
        .expect("grpcurl runs");
    assert!(
        out.status.success(),
        "grpcurl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn grpcurl_lists_all_six_services() {
    let app = spawn_app().await;
    let out = run(&app, &[], &["list"]).await;
    for service in [
        "msgw.v1.MessagingService",
        "msgw.v1.AccountService",
        "msgw.v1.TemplateService",
        "msgw.v1.EventService",
        "msgw.v1.VerificationService",
        "msgw.v1.FraudGuardService",
        "grpc.health.v1.Health",
    ] {
        assert!(
            out.lines().any(|l| l == service),
            "{service} missing from:\n{out}"
        );
    }
}

#[tokio::test]
async fn grpcurl_describes_services_with_doc_comments() {
    let app = spawn_app().await;
    let out = run(&app, &[], &["describe", "msgw.v1.MessagingService"]).await;
    assert!(
        out.contains(
            "rpc SendViber ( .msgw.v1.SendViberRequest ) returns ( .msgw.v1.SendViberResponse )"
        ),
        "{out}"
    );
    assert!(
        out.contains("Sends an SMS"),
        "doc comments are served: {out}"
    );
    let out = run(&app, &[], &["describe", "msgw.v1.SendSmsRequest"]).await;
    assert!(out.contains("3600 to 259200"), "{out}");
    let out = run(&app, &[], &["describe", "msgw.v1.AccountService"]).await;
    assert!(out.contains("rpc GetBalance"), "{out}");
}

#[tokio::test]
async fn grpcurl_calls_get_balance() {
    let app = spawn_app().await;
    let out = run(&app, &["-d", "{}"], &["msgw.v1.AccountService/GetBalance"]).await;
    let v: Value = serde_json::from_str(&out).expect("grpcurl prints JSON");
    // google.type.Money in proto3 JSON: int64 units as a string.
    assert_eq!(
        v["amount"],
        serde_json::json!({"currencyCode": "UAH", "units": "31", "nanos": 168300000})
    );
    assert_eq!(
        app.gateway.only_item(),
        serde_json::json!({"type": "balance"})
    );
}

#[tokio::test]
async fn the_verification_examples_run_verbatim_on_the_sandbox() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/verification.md"))
        .expect("docs/verification.md");
    let section = doc
        .split("# Verifying phone numbers\n")
        .nth(1)
        .expect("the document's section");
    let script = section
        .split("```sh\n")
        .nth(1)
        .and_then(|block| block.split("\n```").next())
        .expect("its sh block");
    let app = crate::helpers::spawn_sandboxed_app(std::time::Duration::from_millis(50)).await;
    // Twice: the ids are new on every run, so a second run is no replay.
    for run in ["first", "second"] {
        let stdout = run_doc_script(&app, script).await;
        for expected in [
            "\"checksLeft\": 4",
            "VERIFICATION_STATUS_APPROVED",
            "CHANNEL_TELEGRAM",
            "VERIFICATION_STATUS_CANCELED",
        ] {
            assert!(
                stdout.contains(expected),
                "{run} run: {expected} missing:\n{stdout}"
            );
        }
        // A second run within a millisecond would reuse the ids.
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// docs/sandbox.md's pumping run, verbatim with grpcurl, against the sandbox set as the
/// doc starts it: about 30 codes go out, then the range is held.
#[tokio::test]
async fn the_sandbox_docs_pumping_run_gets_the_range_held() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/sandbox.md"))
        .expect("docs/sandbox.md");
    let section = doc
        .split("\n## Playing an SMS-pumping attack\n")
        .nth(1)
        .expect("the doc's section");
    let blocks: Vec<&str> = section
        .split("```sh\n")
        .skip(1)
        .filter_map(|block| block.split("\n```").next())
        .collect();
    assert!(
        blocks[0].starts_with("MSGW_VERIFY_GUARD_GRACE=1s "),
        "the test starts msgw as the doc does: {}",
        blocks[0]
    );
    let app = crate::helpers::spawn(crate::helpers::Options {
        sandbox_step: Some(std::time::Duration::from_millis(50)),
        verify: msgw::core::verify::Settings {
            guard: msgw::core::verify::guard::Settings {
                grace: std::time::Duration::from_secs(1),
                ..Default::default()
            },
            ..Default::default()
        },
        ..Default::default()
    })
    .await;
    let stdout = run_doc_script(&app, blocks[1]).await;
    let sent = stdout.matches(": code sent").count();
    let refused = stdout.matches(": refused SUSPECTED_FRAUD").count();
    assert!((20..=35).contains(&sent), "{sent} sent:\n{stdout}");
    assert_eq!(sent + refused, 60, "{stdout}");
    assert!(stdout.contains("\"range\": \"881234\""), "{stdout}");
}
