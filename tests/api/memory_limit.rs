//! The memory limit msgw finds is its own: the real binary started inside a cgroup-v1
//! memory group (made by the test, as root, under `/sys/fs/cgroup/memory`) logs that
//! group's limit, not the machine's; where cgroup v1 is absent, the test says so and
//! checks what msgw finds under v2 instead.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

/// A memory group the test made, removed when dropped (after msgw in it has exited).
struct Group(PathBuf);

impl Drop for Group {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Stops a child when dropped, whatever the test's outcome.
struct Stopped(Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `command` (msgw serve, logging JSON) and reads its log until it serves: the
/// fields of its "memory limit found" line.
fn memory_limit_logged(mut command: Command) -> (Value, Stopped) {
    let mut child = command.stderr(Stdio::piped()).spawn().expect("msgw starts");
    let stderr = child.stderr.take().expect("piped");
    let child = Stopped(child);
    let mut found = None;
    let mut log = Vec::new();
    for line in BufReader::new(stderr).lines() {
        let Ok(line) = line else { break };
        let v: Value = serde_json::from_str(&line).unwrap_or_default();
        if v["fields"]["message"] == "memory limit found" {
            found = Some(v["fields"].clone());
        }
        if v["fields"]["message"] == "msgw serving" {
            break;
        }
        log.push(line);
    }
    let found = found.unwrap_or_else(|| panic!("msgw logged no memory limit:\n{}", log.join("\n")));
    (found, child)
}

fn serve(dir: &Path) -> Vec<String> {
    crate::helpers::serve_args(dir)
}

#[test]
fn msgw_logs_the_memory_limit_of_its_own_cgroup() {
    let dir = tempfile::tempdir().unwrap();
    let v1 = Path::new("/sys/fs/cgroup/memory");
    if !v1.join("memory.limit_in_bytes").exists() {
        eprintln!(
            "no cgroup v1 memory controller at {}: checking cgroup v2",
            v1.display()
        );
        return checks_v2(dir.path());
    }
    assert!(
        rustix::process::geteuid().is_root(),
        "making a cgroup-v1 memory group needs root"
    );
    let group = Group(v1.join(format!("msgw-test-{}", std::process::id())));
    std::fs::create_dir(&group.0).expect("a memory group is made");
    let limit: u64 = 256 << 20;
    std::fs::write(group.0.join("memory.limit_in_bytes"), limit.to_string())
        .expect("its limit is set");
    // A shell moves itself into the group, then becomes msgw.
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(r#"echo $$ > "$1/cgroup.procs" && shift && exec "$@""#)
        .arg("sh")
        .arg(&group.0)
        .arg(env!("CARGO_BIN_EXE_msgw"))
        .args(serve(dir.path()));
    let (found, msgw) = memory_limit_logged(command);
    assert_eq!(found["memory_limit"], limit, "{found}");
    let from = found["from"].as_str().unwrap_or_default();
    assert!(
        from.starts_with("cgroup v1 ") && from.contains(&*group.0.to_string_lossy()),
        "{found}"
    );
    drop(msgw);
    drop(group);
}

/// Without cgroup v1: msgw reports its own v2 group's limit when it has one, else
/// the machine's memory.
fn checks_v2(dir: &Path) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_msgw"));
    command.args(serve(dir));
    let (found, _msgw) = memory_limit_logged(command);
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let group = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap_or("/")
        .trim_start_matches('/');
    let max = std::fs::read_to_string(Path::new("/sys/fs/cgroup").join(group).join("memory.max"))
        .ok()
        .and_then(|m| m.trim().parse::<u64>().ok());
    let from = found["from"].as_str().unwrap_or_default();
    match max {
        Some(max) => {
            assert!(from.starts_with("cgroup v2 "), "{found}");
            assert!(found["memory_limit"].as_u64() <= Some(max), "{found}");
        }
        None => assert!(found["memory_limit"].as_u64() > Some(0), "{found}"),
    }
}
