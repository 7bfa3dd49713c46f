//! The verify secret on SQLite when none is configured: generated once and kept in a
//! file next to the database (`<file>.verify-secret`, mode 0600), never in the store.
//! A copy of the database (`msgw copy-store`, a backup of the file) then holds no key
//! to its codes, while a restart keeps checking the codes it sent before.

use std::{io::Write, path::Path};

use secrecy::SecretString;

/// The secret kept in `path`, created (with a random one) if missing. The file appears
/// whole or not at all: written beside it first, then linked into place, so a crash
/// never leaves an empty one behind and two processes starting at once agree.
pub fn kept(path: &Path) -> std::io::Result<SecretString> {
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(secret) = read(path)? {
        return Ok(secret);
    }
    let mut draft = path.as_os_str().to_owned();
    draft.push(format!(".{}.tmp", std::process::id()));
    let draft = std::path::PathBuf::from(draft);
    let secret = crate::config::random_token();
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&draft)?;
    file.write_all(secret.as_bytes())?;
    file.sync_all()?;
    let linked = std::fs::hard_link(&draft, path);
    std::fs::remove_file(&draft)?;
    match linked {
        Ok(()) => {
            tracing::info!(
                path = %path.display(),
                "no verification secret (MSGW_VERIFY_SECRET) configured: generated one, kept in this file"
            );
            Ok(SecretString::from(secret))
        }
        // Another process linked its own first: that one counts.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read(path)?
            .ok_or_else(|| std::io::Error::other("the verification secret file vanished")),
        Err(e) => Err(e),
    }
}

/// The secret in `path`, if the file exists.
fn read(path: &Path) -> std::io::Result<Option<SecretString>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let text = text.trim();
    if text.len() < 16 {
        return Err(std::io::Error::other(format!(
            "{} holds no verification secret of at least 16 characters",
            path.display()
        )));
    }
    Ok(Some(SecretString::from(text.to_owned())))
}

/// Where the secret of the SQLite database at `url` is kept; `None` for an in-memory one
/// (its verifications end with the process, and so may its secret).
pub fn path_for(url: &str) -> Option<std::path::PathBuf> {
    let file = crate::store::sqlite_file(url)?;
    let mut name = file.file_name()?.to_owned();
    name.push(".verify-secret");
    Some(file.with_file_name(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_secret_is_made_once_private_and_kept() {
        use secrecy::ExposeSecret;
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("msgw.db.verify-secret");
        let first = kept(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(kept(&path).unwrap().expose_secret(), first.expose_secret());
        let url = format!("sqlite://{}", dir.path().join("msgw.db").display());
        assert_eq!(path_for(&url), Some(path));
        assert_eq!(path_for("sqlite::memory:"), None);
    }
}
