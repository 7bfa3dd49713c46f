//! Secrets msgw keeps next to its SQLite database when none is configured: generated
//! once into a file beside the database (`<file>.verify-secret`,
//! `<file>.webhook-secret`; mode 0600), never in the store. A copy of the database
//! (`msgw copy-store`, a backup of the file) then holds no key, while a restart keeps
//! checking the codes it sent and verifying the hooks it signed before.

use std::{io::Write, path::Path};

use anyhow::Context;
use secrecy::SecretString;

/// A secret kept next to the database when its variable is not set.
#[derive(Debug, Clone, Copy)]
pub struct Kept {
    /// What it is, for logs and errors.
    what: &'static str,
    /// The variable that configures it instead.
    variable: &'static str,
    /// The suffix of its file's name after the database file's.
    suffix: &'static str,
}

/// The HMAC key of one-time codes at rest.
pub const VERIFY: Kept = Kept {
    what: "verification secret",
    variable: "MSGW_VERIFY_SECRET",
    suffix: ".verify-secret",
};

/// The HMAC key of hook tokens.
pub const WEBHOOK: Kept = Kept {
    what: "webhook secret",
    variable: "MSGW_WEBHOOK_SECRET",
    suffix: ".webhook-secret",
};

impl Kept {
    /// The secret of the store at `store_url`: kept next to a SQLite file (created
    /// there if missing), or random for this run with an in-memory database (whose
    /// contents end with the process too). With it, the line to log when it was made
    /// now: msgw logs it once it has said what it runs against.
    pub fn of_store(self, store_url: &str) -> anyhow::Result<(SecretString, Option<String>)> {
        let Some(path) = self.path_for(store_url) else {
            let note = format!(
                "no {} ({}) configured: generated a random one for this run",
                self.what, self.variable
            );
            return Ok((
                SecretString::from(crate::process::secrets::random_token()),
                Some(note),
            ));
        };
        let (secret, made) = self.kept(&path).with_context(|| {
            format!(
                "cannot keep the {} in {}: set {} or make the database's directory writable",
                self.what,
                path.display(),
                self.variable
            )
        })?;
        let note = made.then(|| {
            format!(
                "no {} ({}) configured: generated one, kept in {}",
                self.what,
                self.variable,
                path.display()
            )
        });
        Ok((secret, note))
    }

    /// The secret kept in `path`, created (with a random one) if missing, and whether it
    /// was created now. The file appears whole or not at all: written beside it first,
    /// then linked into place, so a crash never leaves an empty one behind and two
    /// processes starting at once agree.
    pub fn kept(self, path: &Path) -> std::io::Result<(SecretString, bool)> {
        use std::os::unix::fs::OpenOptionsExt;
        if let Some(secret) = self.read(path)? {
            return Ok((secret, false));
        }
        let mut draft = path.as_os_str().to_owned();
        draft.push(format!(".{}.tmp", std::process::id()));
        let draft = std::path::PathBuf::from(draft);
        let secret = crate::process::secrets::random_token();
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
            Ok(()) => Ok((SecretString::from(secret), true)),
            // Another process linked its own first: that one counts.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let secret = self.read(path)?.ok_or_else(|| {
                    std::io::Error::other(format!("the {} file vanished", self.what))
                })?;
                Ok((secret, false))
            }
            Err(e) => Err(e),
        }
    }

    /// The secret in `path`, if the file exists.
    fn read(self, path: &Path) -> std::io::Result<Option<SecretString>> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let text = text.trim();
        if text.len() < 16 {
            return Err(std::io::Error::other(format!(
                "{} holds no {} of at least 16 characters",
                path.display(),
                self.what
            )));
        }
        Ok(Some(SecretString::from(text.to_owned())))
    }

    /// Where this secret of the SQLite database at `url` is kept; `None` for an
    /// in-memory one.
    pub fn path_for(self, url: &str) -> Option<std::path::PathBuf> {
        let file = crate::adapters::store::sqlite_file(url)?;
        let mut name = file.file_name()?.to_owned();
        name.push(self.suffix);
        Some(file.with_file_name(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_made_once_private_and_kept_apart_from_the_others() {
        use secrecy::ExposeSecret;
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("msgw.db").display());
        let path = dir.path().join("msgw.db.verify-secret");
        assert_eq!(VERIFY.path_for(&url), Some(path.clone()));
        let (first, note) = VERIFY.of_store(&url).unwrap();
        assert!(note.unwrap().contains("MSGW_VERIFY_SECRET"));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let (again, note) = VERIFY.of_store(&url).unwrap();
        assert_eq!(again.expose_secret(), first.expose_secret());
        assert_eq!(note, None, "nothing made, nothing to tell");
        let (webhook, _) = WEBHOOK.of_store(&url).unwrap();
        assert!(dir.path().join("msgw.db.webhook-secret").is_file());
        assert_ne!(webhook.expose_secret(), first.expose_secret());
        assert_eq!(
            WEBHOOK.of_store(&url).unwrap().0.expose_secret(),
            webhook.expose_secret()
        );
        assert_eq!(VERIFY.path_for("sqlite::memory:"), None);
        let (a, b) = (
            WEBHOOK.of_store("sqlite::memory:").unwrap().0,
            WEBHOOK.of_store("sqlite::memory:").unwrap().0,
        );
        assert_ne!(a.expose_secret(), b.expose_secret(), "random per start");
    }

    #[test]
    fn a_file_too_short_to_be_a_secret_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("msgw.db.webhook-secret");
        std::fs::write(&path, "short\n").unwrap();
        let e = WEBHOOK.kept(&path).unwrap_err();
        assert!(e.to_string().contains("webhook secret"), "{e}");
    }
}
