//! Compiles `proto/` without a system protoc and writes the descriptor set that
//! gRPC reflection serves.

use std::{env, fs, path::PathBuf};

use prost::Message;

const PROTOS: &[&str] = &[
    "proto/msgw/v1/common.proto",
    "proto/msgw/v1/messaging.proto",
    "proto/msgw/v1/account.proto",
    "proto/msgw/v1/template.proto",
    "proto/msgw/v1/events.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(PROTOS, ["proto"])?;
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    fs::write(out_dir.join("msgw_descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure()
        .extern_path(".google.rpc", "::tonic_types::pb")
        .compile_fds(fds)?;
    Ok(())
}
