//! The example clients in `examples/`, run against a real msgw on its sandbox: what a
//! team copies must work.

use std::{path::PathBuf, time::Duration};

use tokio::process::Command;

use crate::helpers::{Callers, Entry, Options, TestApp, spawn};

/// The token the examples authenticate with (`MSGW_TOKEN`).
const TOKEN: &str = "example-token-2c9d8e";

/// msgw on its sandbox, with one caller whose token the examples get: what a team
/// runs in production authenticates, and the examples must too.
async fn app() -> TestApp {
    spawn(Options {
        sandbox_step: Some(Duration::from_millis(20)),
        callers: Some(Callers::new().caller(Entry::token("examples", TOKEN))),
        ..Options::default()
    })
    .await
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs an example to its end and checks it printed each of `lines`.
async fn run_example(command: &mut Command, lines: &[&str]) {
    let out = command.output().await.expect("the example runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the example failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in lines {
        assert!(stdout.contains(line), "{line:?} missing from:\n{stdout}");
    }
}

#[tokio::test]
async fn the_python_example_sends_batches_waits_for_the_final_status_reads_errors_and_verifies() {
    let python = repo().join(".tools/venv/bin/python");
    assert!(
        python.exists(),
        "Python with grpcio is not installed: run .ci/install-tools (the README's test command does)"
    );
    let app = app().await;
    // The stubs `buf generate` wrote (.ci/install-tools runs it); the script generates
    // them with grpcio-tools itself when they are missing.
    run_example(
        Command::new(python)
            .arg(repo().join("examples/python/quickstart.py"))
            .env("MSGW_TOKEN", TOKEN)
            .args([
                "--addr",
                &app.addr.to_string(),
                "--id",
                "7000",
                "--wait",
                "30",
            ]),
        &[
            "sent 7000: msg_id ",
            "batch item 0: code 0 (send_sms)",
            "batch item 1: code 0 (get_balance)",
            "status of 7000: DELIVERED (final: True)",
            "refused: INVALID_ARGUMENT, fields ['phone']",
            " UAH",
            "verification 7003: VERIFICATION_STATUS_PENDING, 5 checks left",
            "wrong code: 4 checks left",
            "verified: VERIFICATION_STATUS_APPROVED",
            "scheduled 7004 for ",
            "cancelled 7004, due ",
        ],
    )
    .await;
}

#[tokio::test]
async fn the_typescript_example_typechecks_sends_batches_waits_reads_errors_and_verifies() {
    let dir = repo().join("examples/typescript");
    for needed in ["node_modules/.bin/tsx", "gen/msgw/v1/messaging_pb.ts"] {
        assert!(
            dir.join(needed).exists(),
            "{needed} is missing: run .ci/install-tools (npm ci and buf generate; the README's test command does)"
        );
    }
    let typecheck = Command::new(dir.join("node_modules/.bin/tsc"))
        .args(["-p", "."])
        .current_dir(&dir)
        .output()
        .await
        .expect("tsc runs");
    assert!(
        typecheck.status.success(),
        "the example does not typecheck:\n{}",
        String::from_utf8_lossy(&typecheck.stdout)
    );
    let app = app().await;
    run_example(
        Command::new(dir.join("node_modules/.bin/tsx"))
            .env("MSGW_TOKEN", TOKEN)
            .args([
                "quickstart.ts",
                "--addr",
                &app.addr.to_string(),
                "--id",
                "7100",
                "--wait",
                "30",
            ])
            .current_dir(&dir),
        &[
            "sent 7100: msg_id ",
            "batch item 0: code 0 (sendSms)",
            "batch item 1: code 0 (getBalance)",
            "status of 7100: DELIVERED (final: true)",
            r#"refused: InvalidArgument, fields ["phone"]"#,
            " UAH",
            "verification 7103: VERIFICATION_STATUS_PENDING, 5 checks left",
            "wrong code: 4 checks left",
            "verified: VERIFICATION_STATUS_APPROVED",
            "scheduled 7104 for ",
            "cancelled 7104, due ",
        ],
    )
    .await;
}

#[tokio::test]
async fn the_typescript_example_generates_its_code_without_python() {
    // A copy of proto/ beside the example's installed plugin, and a PATH with Node alone.
    let root = repo();
    let work = tempfile::tempdir().unwrap();
    let proto = work.path().join("proto");
    copy_dir(&root.join("proto"), &proto);
    let example = work.path().join("examples/typescript");
    std::fs::create_dir_all(&example).unwrap();
    std::os::unix::fs::symlink(
        root.join("examples/typescript/node_modules"),
        example.join("node_modules"),
    )
    .unwrap();
    let bin = work.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let node = which("node");
    std::os::unix::fs::symlink(&node, bin.join("node")).unwrap();
    let generated = Command::new(root.join(".tools/node_modules/.bin/buf"))
        .args(["generate", "--template", "buf.gen.typescript.yaml"])
        .current_dir(&proto)
        .env("PATH", &bin)
        .output()
        .await
        .expect("buf runs (run .ci/install-tools)");
    assert!(
        generated.status.success(),
        "buf generate for TypeScript failed without Python on PATH:\n{}",
        String::from_utf8_lossy(&generated.stderr)
    );
    assert!(example.join("gen/msgw/v1/messaging_pb.ts").exists());
}

/// Copies a directory tree.
fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The absolute path of a program on PATH.
fn which(program: &str) -> std::path::PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(program))
        .find(|path| path.is_file())
        .unwrap_or_else(|| panic!("{program} is not on PATH"))
}

#[tokio::test]
async fn both_examples_speak_mtls_from_environment_variables() {
    let certs = tempfile::tempdir().unwrap();
    crate::tls::run_certificate_recipe(certs.path());
    let file = |name: &str| certs.path().join(name);
    let read = |name: &str| std::fs::read_to_string(file(name)).unwrap();
    let app = spawn(Options {
        sandbox_step: Some(Duration::from_millis(20)),
        tls: Some(msgw::transport::auth::tls::TlsFiles {
            cert: file("server.pem"),
            key: file("server.key"),
            client_ca: Some(file("ca.pem")),
        }),
        tls_client: Some(crate::helpers::TlsClient {
            ca: read("ca.pem"),
            identity: Some((read("client.pem"), read("client.key"))),
        }),
        ..Options::default()
    })
    .await;
    let addr = format!("localhost:{}", app.addr.port());
    let mtls = |command: &mut Command| {
        command
            .env("MSGW_CA_FILE", file("ca.pem"))
            .env("MSGW_CERT_FILE", file("client.pem"))
            .env("MSGW_KEY_FILE", file("client.key"));
    };
    let python = repo().join("examples/python");
    let mut command = Command::new(repo().join(".tools/venv/bin/python"));
    command
        .args([
            "quickstart.py",
            "--addr",
            &addr,
            "--id",
            "7200",
            "--wait",
            "30",
        ])
        .current_dir(&python);
    mtls(&mut command);
    run_example(
        &mut command,
        &["sent 7200: msg_id ", "status of 7200: DELIVERED"],
    )
    .await;
    let typescript = repo().join("examples/typescript");
    let mut command = Command::new(typescript.join("node_modules/.bin/tsx"));
    command
        .args([
            "quickstart.ts",
            "--addr",
            &addr,
            "--id",
            "7210",
            "--wait",
            "30",
        ])
        .current_dir(&typescript);
    mtls(&mut command);
    run_example(
        &mut command,
        &["sent 7210: msg_id ", "status of 7210: DELIVERED"],
    )
    .await;
}
