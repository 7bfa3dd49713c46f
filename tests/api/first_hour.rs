//! The README's first page as a new user meets it: its quick start runs as written,
//! twice in a row against one msgw, and prints what the README shows (ids, times and
//! codes aside); what msgw leaves in a clone stays out of `git status`.

use std::time::Duration;

use tokio::io::AsyncBufReadExt;
use tokio::process::Command;

use crate::helpers::spawn_sandboxed_app;
use crate::tools::path_with_grpcurl;

/// The command blocks of the README's section `title`, each with the output block that
/// follows it, if any. Installing msgw and grpcurl and starting msgw are left out: the
/// test has its own msgw, and grpcurl from `.ci/install-tools`.
fn readme_steps(title: &str) -> Vec<(String, Option<String>)> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let section = readme
        .split(&format!("\n## {title}\n"))
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .unwrap_or_else(|| panic!("the README's section {title:?}"));
    let mut blocks: Vec<(String, String)> = Vec::new();
    let mut lines = section.lines();
    while let Some(line) = lines.next() {
        if let Some(kind) = line.strip_prefix("```") {
            let body: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
            blocks.push((kind.to_owned(), body.join("\n")));
        }
    }
    let mut steps = Vec::new();
    for (i, (kind, body)) in blocks.iter().enumerate() {
        let setup = ["cargo install", "python3 -m venv"]
            .iter()
            .any(|s| body.contains(s))
            || body.trim() == "msgw serve";
        if kind != "sh" || setup {
            continue;
        }
        let output = blocks
            .get(i + 1)
            .filter(|(kind, _)| kind == "text")
            .map(|(_, body)| body.clone());
        steps.push((body.clone(), output));
    }
    steps
}

/// `text` with every number (ids, times, cursors, codes) as `N`.
fn shape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_number = false;
    for c in text.trim().chars() {
        if c.is_ascii_digit() || (in_number && c == '.') {
            if !in_number {
                out.push('N');
            }
            in_number = true;
        } else {
            in_number = false;
            out.push(c);
        }
    }
    out
}

#[tokio::test]
async fn the_readmes_quick_start_runs_as_written_twice_and_prints_what_it_shows() {
    let steps = readme_steps("Quick start");
    assert!(steps.len() >= 6, "the quick start's steps: {steps:#?}");
    runs_as_written_twice(&steps).await;
}

#[tokio::test]
async fn the_readmes_lifecycle_examples_run_as_written_twice_and_print_what_they_show() {
    let steps = readme_steps("Message lifecycle: parts and schedules");
    assert!(steps.len() >= 2, "the section's steps: {steps:#?}");
    runs_as_written_twice(&steps).await;
}

#[tokio::test]
async fn the_readmes_verification_example_runs_as_written_twice_and_prints_what_it_shows() {
    let steps = readme_steps("Verifying phone numbers");
    assert!(!steps.is_empty(), "the section's steps: {steps:#?}");
    runs_as_written_twice(&steps).await;
}

#[tokio::test]
async fn the_readmes_opt_out_examples_run_as_written_twice_and_print_what_they_show() {
    let steps = readme_steps("Opt-outs");
    assert!(steps.len() >= 2, "the section's steps: {steps:#?}");
    runs_as_written_twice(&steps).await;
}

#[tokio::test]
async fn the_readmes_shaping_example_runs_as_written_twice_and_prints_what_it_shows() {
    let steps = readme_steps("Traffic shaping");
    assert!(!steps.is_empty(), "the section's steps: {steps:#?}");
    runs_as_written_twice(&steps).await;
}

/// Runs `steps` as one script, twice in a row against one msgw on its sandbox, and
/// checks each step prints what the README shows (numbers aside).
async fn runs_as_written_twice(steps: &[(String, Option<String>)]) {
    // The sandbox's default pace: statuses move every second, as for a user.
    let app = spawn_sandboxed_app(Duration::from_secs(1)).await;
    let mut script = String::new();
    for (i, (commands, _)) in steps.iter().enumerate() {
        script.push_str(&format!("echo '@@step {i}'\n{commands}\n"));
    }
    let script = script
        .replace("localhost:50051", &app.addr.to_string())
        .replace("localhost:9090", &app.admin_addr.to_string());
    let path = path_with_grpcurl();
    for run in ["first", "second"] {
        let out = tokio::time::timeout(
            Duration::from_secs(60),
            Command::new("bash")
                .args(["-euo", "pipefail", "-c", &script])
                .env("PATH", &path)
                .output(),
        )
        .await
        .expect("the quick start finishes")
        .expect("bash runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{run} run failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let printed: Vec<&str> = stdout.split("@@step ").skip(1).collect();
        assert_eq!(printed.len(), steps.len(), "{run} run:\n{stdout}");
        for ((commands, shown), printed) in steps.iter().zip(printed) {
            let printed = printed.split_once('\n').map_or("", |(_, rest)| rest);
            if let Some(shown) = shown {
                assert_eq!(
                    shape(printed),
                    shape(shown),
                    "{run} run of\n{commands}\nprinted\n{printed}\nwhere the README shows\n{shown}"
                );
            }
        }
    }
}

#[tokio::test]
async fn what_msgw_leaves_in_a_clone_is_ignored_by_git() {
    let clone = tempfile::tempdir().unwrap();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/.gitignore"),
        clone.path().join(".gitignore"),
    )
    .unwrap();
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(clone.path())
            .output()
            .expect("git runs")
    };
    assert!(git(&["init", "-q"]).status.success());
    // `msgw serve` as the README runs it: the default store, ./msgw.db.
    let dir = clone.path().to_owned();
    let (mut msgw, _) = tokio::task::spawn_blocking(move || {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_msgw"));
        command
            .args(["serve", "--log-format", "json"])
            .args(["--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
            .args(["--admin-addr", "127.0.0.1:0"])
            .current_dir(dir)
            .env_remove("MSGW_STORE_URL")
            .env_remove("MSGW_WEBHOOK_SECRET")
            .env_remove("MSGW_VERIFY_SECRET");
        crate::helpers::serving_binary(command)
    })
    .await
    .unwrap();
    msgw.kill().unwrap();
    msgw.wait().unwrap();
    let made: Vec<String> = std::fs::read_dir(clone.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        made.iter().any(|f| f == "msgw.db.verify-secret")
            && made.iter().any(|f| f == "msgw.db.webhook-secret"),
        "{made:?}"
    );
    let status = git(&["status", "--porcelain", "--untracked-files=all"]);
    assert_eq!(
        String::from_utf8_lossy(&status.stdout).trim(),
        "?? .gitignore",
        "files msgw made: {made:?}"
    );
}

/// Seven loopback ports in a row that nothing listens on now, the first of them
/// returned (the recipe takes a base port). Below the ephemeral range (Linux: from
/// 32768), where the other tests' port-0 sockets and outgoing connections never land.
fn free_port_run() -> u16 {
    for _ in 0..200 {
        let base = 20_000 + rand::random::<u16>() % 12_000;
        let free =
            (base..base + 7).all(|port| std::net::TcpListener::bind(("127.0.0.1", port)).is_ok());
        if free {
            return base;
        }
    }
    panic!("no seven free loopback ports in a row");
}

#[tokio::test]
async fn the_two_replica_recipe_runs_as_written() {
    let schema = crate::postgres::TestSchema::create().await;
    let run = tempfile::tempdir().unwrap();
    let path = path_with_grpcurl();
    // Its own process group, so that a recipe that hangs is stopped with the
    // sandbox and replicas it started.
    let child = Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/replicas/two-replicas.sh"
    ))
    .arg("demo")
    .env("PATH", &path)
    .env("MSGW", env!("CARGO_BIN_EXE_msgw"))
    .env("MSGW_STORE_URL", &schema.url)
    .env("BASE_PORT", free_port_run().to_string())
    .env("RUN_DIR", run.path())
    .process_group(0)
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .expect("the script runs");
    let group = child.id().expect("a running script");
    let Ok(out) = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output()).await
    else {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{group}")])
            .status()
            .await;
        panic!("the recipe did not finish within 120 s");
    };
    let out = out.expect("the script's output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let logs = ["sandbox", "replica1", "replica2"]
        .map(|name| {
            std::fs::read_to_string(run.path().join(format!("{name}.log"))).unwrap_or_default()
        })
        .join("\n");
    assert!(
        out.status.success(),
        "{stdout}\n{}\n{logs}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = |heading: &str| {
        stdout
            .split(heading)
            .nth(1)
            .and_then(|rest| rest.split("\n==").next())
            .unwrap_or_default()
            .to_owned()
    };
    assert!(
        after("its final status, on replica 2").contains("MESSAGE_STATUS_DELIVERED"),
        "{stdout}"
    );
    assert!(
        after("its events, on replica 2").contains("\"DELIVERED\""),
        "{stdout}"
    );
    assert!(
        after("its code checked on replica 2").contains("VERIFICATION_STATUS_APPROVED"),
        "{stdout}"
    );
}

/// The log lines the README's quick start shows after `msgw serve`: level, target and
/// message, up to the first field or `...`.
fn readme_log_lines() -> Vec<String> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let block = readme
        .split("```sh\nmsgw serve\n```\n\n```text\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("the README shows what `msgw serve` logs");
    block
        .lines()
        .filter(|line| *line != "...")
        .map(|line| {
            let line = line.split(" ...").next().unwrap_or(line);
            // Up to the first `field=value`: values (addresses) differ.
            let cut = line
                .split(' ')
                .position(|word| word.contains('=') && !word.starts_with('('))
                .map_or(line.len(), |n| {
                    line.split(' ').take(n).map(|w| w.len() + 1).sum::<usize>() - 1
                });
            line[..cut].to_owned()
        })
        .collect()
}

#[tokio::test]
async fn the_log_lines_the_readme_shows_are_what_msgw_serve_prints() {
    let mut shown = readme_log_lines();
    assert!(shown.len() >= 4, "{shown:#?}");
    // The warning of an unoptimised build, as the quick start's is (and this test's).
    if env!("MSGW_OPT_LEVEL") != "0" {
        shown.retain(|line| !line.contains("without optimisation"));
    }
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_msgw"))
        .args([
            "serve",
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
        ])
        .args(["--admin-addr", "127.0.0.1:0"])
        .current_dir(dir.path())
        .env_remove("RUST_LOG")
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("msgw starts");
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut printed = Vec::new();
    let serving = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            // After the timestamp: "LEVEL target: message fields".
            let line = line
                .split_once("Z ")
                .map_or(line.as_str(), |(_, rest)| rest);
            printed.push(line.trim_start().to_owned());
            if line.contains("msgw serving") {
                return;
            }
        }
    })
    .await;
    let _ = child.kill().await;
    assert!(serving.is_ok(), "msgw did not say it serves:\n{printed:#?}");
    assert!(
        printed.iter().all(|l| !l.contains('\u{1b}')),
        "logs to a pipe are plain text: {printed:#?}"
    );
    for line in &shown {
        assert!(
            printed.iter().any(|p| p.starts_with(line.as_str())),
            "the README shows {line:?}; msgw printed:\n{printed:#?}"
        );
    }
}
