//! Secrets as msgw reads them: from an option (`MSGW_X`) or from the file its `_FILE`
//! option names (a mounted Kubernetes Secret), or generated. [`read`] is the one place
//! a configured secret is read, for `msgw serve`, `msgw copy-store` and `msgw guard`.

use std::path::Path;

use anyhow::{Context, bail};
use secrecy::SecretString;

/// The secret given as `value` (trimmed), else read from `file`; `None` when neither
/// is set. An error names the file and why it cannot be used (unreadable, empty).
pub fn read(value: Option<String>, file: Option<&Path>) -> anyhow::Result<Option<SecretString>> {
    match (value, file) {
        (Some(v), _) => Ok(Some(v.trim().to_owned().into())),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            // Editors and `kubectl create secret` leave a newline.
            let text = text.trim();
            if text.is_empty() {
                bail!("{} is empty", path.display());
            }
            Ok(Some(text.to_owned().into()))
        }
        (None, None) => Ok(None),
    }
}

/// 32 random bytes, base64url: URL-safe and strong enough for an HMAC key.
pub fn random_token() -> String {
    use base64::Engine;
    let bytes: [u8; 32] = rand::random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use secrecy::ExposeSecret;

    use super::*;

    #[test]
    fn a_value_wins_and_a_file_is_trimmed_and_must_hold_something() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("secret");
        std::fs::write(&file, "from-the-file\n").unwrap();
        let read_back = |value: Option<&str>, file: Option<&Path>| {
            read(value.map(str::to_owned), file).map(|s| s.map(|s| s.expose_secret().to_owned()))
        };
        assert_eq!(
            read_back(Some(" given "), None).unwrap().as_deref(),
            Some("given")
        );
        assert_eq!(
            read_back(None, Some(&file)).unwrap().as_deref(),
            Some("from-the-file")
        );
        assert_eq!(read_back(None, None).unwrap(), None);
        std::fs::write(&file, "\n").unwrap();
        assert!(
            read_back(None, Some(&file))
                .unwrap_err()
                .to_string()
                .contains("is empty")
        );
        let missing = dir.path().join("missing");
        assert!(
            read_back(None, Some(&missing))
                .unwrap_err()
                .to_string()
                .contains("cannot read")
        );
    }
}
