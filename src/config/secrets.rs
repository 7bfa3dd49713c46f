//! Secrets as the configuration reads them: from an option or from a file (as
//! Kubernetes mounts them), or generated.

use std::path::PathBuf;

use anyhow::{Context, bail};

use super::Problem;

/// A secret from its option `arg` (trimmed) or from the file of `arg_file`; `None`
/// when neither is set, or the file cannot be read (a problem then).
pub(super) fn secret_given(
    arg: &str,
    value: Option<String>,
    file: Option<PathBuf>,
    refuse: &mut dyn FnMut(Problem),
) -> Option<String> {
    match (value, file) {
        (Some(v), _) => Some(v.trim().to_owned()),
        (None, Some(path)) => read_secret(&path)
            .map_err(|e| {
                refuse(Problem::value(
                    &format!("{arg}_file"),
                    path.display(),
                    format!("{e:#}"),
                ))
            })
            .ok(),
        (None, None) => None,
    }
}

/// 32 random bytes, base64url: URL-safe and strong enough for an HMAC key.
pub fn random_token() -> String {
    use base64::Engine;
    let bytes: [u8; 32] = rand::random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Reads a secret from a file, trimming the newline editors and `kubectl create secret` leave.
pub fn read_secret(path: &std::path::Path) -> anyhow::Result<String> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let text = text.trim();
    if text.is_empty() {
        bail!("{} is empty", path.display());
    }
    Ok(text.to_owned())
}
