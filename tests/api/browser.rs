//! The sandbox inbox in a real browser (Debian's Chromium, headless, driven by
//! tests/browser/inbox.py through Selenium): a message sent through gRPC appears on
//! the open page without a reload; its "Undeliverable" button ends it, and the gRPC
//! event stream receives that status. `.ci/install-tools` installs the browser.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use msgw::transport::proto::{MessageStatus, StreamStatusEventsRequest};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use crate::builders::sms_to;
use crate::events::{next, subscribe};
use crate::helpers::spawn_sandboxed_app;

/// The whole browser run at most (Chromium starts in a few seconds).
const DEADLINE: Duration = Duration::from_secs(90);

/// The browser script's next line.
async fn line(
    said: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
) -> Option<String> {
    tokio::time::timeout(DEADLINE, said.next_line())
        .await
        .expect("the browser answers in time")
        .unwrap()
}

fn needed(path: PathBuf) -> PathBuf {
    assert!(
        path.exists(),
        "{} is not installed: run .ci/install-tools (the README's test command does)",
        path.display()
    );
    path
}

#[tokio::test]
async fn a_message_appears_in_the_inbox_page_live_and_its_button_reaches_the_event_stream() {
    let python = needed(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".tools/venv/bin/python"));
    needed(PathBuf::from("/usr/bin/chromium"));
    needed(PathBuf::from("/usr/bin/chromedriver"));
    // Statuses stay ACCEPTED for an hour: only the button ends the message.
    let app = spawn_sandboxed_app(Duration::from_secs(3600)).await;
    let mut stream = subscribe(&app, StreamStatusEventsRequest::default()).await;
    let screenshot = std::env::var_os("MSGW_INBOX_SCREENSHOT");
    let mut browser = Command::new(python);
    browser
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/browser/inbox.py"
        ))
        .arg("--inbox")
        .arg(format!("http://{}/sandbox/", app.admin_addr))
        .args(["--timeout", &DEADLINE.as_secs().to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(path) = &screenshot {
        browser.arg("--screenshot").arg(path);
    }
    let mut browser = browser.spawn().expect("python runs");
    let mut said = BufReader::new(browser.stdout.take().unwrap()).lines();
    let mut stdin = browser.stdin.take().unwrap();
    let ready = line(&mut said).await;
    if ready.as_deref() != Some("ready") {
        let out = browser.wait_with_output().await.unwrap();
        panic!(
            "the browser did not load the page: {ready:?}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let sent = app
        .messaging()
        .send_sms(sms_to(90_001, "380971234567"))
        .await
        .expect("sent")
        .into_inner();
    stdin.write_all(b"90001\n").await.unwrap();
    let clicked = line(&mut said).await;
    if clicked.as_deref() != Some("clicked") {
        let out = browser.wait_with_output().await.unwrap();
        panic!(
            "the browser did not end the message: {clicked:?}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let event = next(&mut stream).await;
    assert_eq!(event.id, 90_001);
    assert_eq!(event.msg_id, sent.receipt.unwrap().msg_id);
    assert_eq!(event.status(), MessageStatus::Undeliverable);
    let status = tokio::time::timeout(DEADLINE, browser.wait())
        .await
        .expect("the browser closes")
        .unwrap();
    assert!(status.success(), "{status:?}");
}
