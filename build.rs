//! Compiles `proto/` without a system protoc and writes the descriptor set that
//! gRPC reflection serves; records the source revision for `msgw_build_info`.

use std::{env, fs, path::PathBuf};

use prost::Message;

const PROTOS: &[&str] = &[
    "proto/msgw/v1/common.proto",
    "proto/msgw/v1/messaging.proto",
    "proto/msgw/v1/account.proto",
    "proto/msgw/v1/template.proto",
    "proto/msgw/v1/events.proto",
    "proto/msgw/v1/verification.proto",
    "proto/msgw/v1/fraud_guard.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    println!("cargo:rustc-env=MSGW_REVISION={}", revision());
    // What `msgw serve` says at start of a build not made to be deployed.
    println!(
        "cargo:rustc-env=MSGW_OPT_LEVEL={}",
        env::var("OPT_LEVEL").unwrap_or_default()
    );
    let fds = protox::compile(PROTOS, ["proto"])?;
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    fs::write(out_dir.join("msgw_descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure()
        .extern_path(".google.rpc", "::tonic_types::pb")
        // google.type.Money is written by hand in src/proto.rs: prost would generate it
        // into a module path the msgw.v1 code cannot reach from `crate::proto`.
        .extern_path(".google.type", "crate::proto::google_type")
        .compile_fds(fds)?;
    Ok(())
}

/// The source revision: `MSGW_REVISION` when set (an image build without `.git`), else
/// the git commit, else "unknown".
fn revision() -> String {
    println!("cargo:rerun-if-env-changed=MSGW_REVISION");
    if let Ok(revision) = env::var("MSGW_REVISION") {
        return revision;
    }
    // Only paths that exist: a missing one would rerun this script on every build.
    for path in [".git/HEAD", ".git/refs/heads", ".git/packed-refs"] {
        if std::path::Path::new(path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}
