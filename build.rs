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
    "proto/msgw/v1/suppression.proto",
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
    fs::write(out_dir.join("msgw_rpcs.rs"), rpc_names(&fds))?;
    tonic_prost_build::configure()
        .extern_path(".google.rpc", "::tonic_types::pb")
        // google.type.Money is written by hand in src/proto.rs: prost would generate it
        // into a module path the msgw.v1 code cannot reach from `crate::transport::proto`.
        .extern_path(".google.type", "crate::transport::proto::google_type")
        .compile_fds(fds)?;
    Ok(())
}

/// A module per `msgw.v1` service with a constant per RPC (`SEND_SMS = "SendSms"`),
/// and `ALL`, every RPC of the package: code names RPCs through these, so a renamed or
/// removed RPC fails the build instead of a string copy going stale.
fn rpc_names(fds: &prost_types::FileDescriptorSet) -> String {
    let mut out = String::new();
    let mut all = Vec::new();
    for file in fds.file.iter().filter(|f| f.package() == "msgw.v1") {
        for service in &file.service {
            out += &format!(
                "/// `msgw.v1.{0}`.\npub mod {1} {{\n    /// The service's full name.\n    pub const SERVICE: &str = \"msgw.v1.{0}\";\n",
                service.name(),
                snake(service.name())
            );
            let mut names = String::new();
            for method in &service.method {
                out += &format!(
                    "    /// `{0}`.\n    pub const {1}: &str = \"{0}\";\n",
                    method.name(),
                    snake(method.name()).to_uppercase()
                );
                names += &format!("{}, ", snake(method.name()).to_uppercase());
                all.push(method.name().to_owned());
            }
            out += &format!(
                "    /// Every RPC of the service.\n    pub const ALL: &[&str] = &[{names}];\n}}\n"
            );
        }
    }
    out += "/// Every RPC of `msgw.v1`, by method name.\npub const ALL: &[&str] = &[\n";
    for name in all {
        out += &format!("    \"{name}\",\n");
    }
    out + "];\n"
}

/// `SendSms` → `send_sms`.
fn snake(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
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
