//! The secrets of `msgw serve`: each given as a value or in the file of its `_FILE`
//! option, checked for length and form, and, on a store replicas share, required
//! rather than generated.

use std::path::PathBuf;

use secrecy::{ExposeSecret, SecretString};

use super::Problem;
use crate::process::cli::ServeArgs;

/// The secrets, read and checked.
pub(super) struct Secrets {
    pub(super) webhook: Option<SecretString>,
    pub(super) webhook_previous: Option<SecretString>,
    pub(super) verify: Option<SecretString>,
    pub(super) account_token: SecretString,
    /// No account token was given: the one above was generated for this run.
    pub(super) account_token_generated: bool,
    pub(super) store_password: Option<SecretString>,
}

impl Secrets {
    /// Takes the secrets out of `args` and checks them, refusing each problem.
    /// `shared_store`: the store is PostgreSQL, shared by replicas.
    pub(super) fn read(
        args: &mut ServeArgs,
        shared_store: bool,
        refuse: &mut impl FnMut(Problem),
    ) -> Self {
        let store_password = match args.store_password_file.take() {
            Some(path) if !shared_store => {
                refuse(Problem::value(
                    "store_password_file",
                    path.display(),
                    "is for a postgres:// MSGW_STORE_URL only",
                ));
                None
            }
            file => secret("store_password", None, file, refuse),
        };
        // A secret given but refused (too short, its file unreadable) is not also "not
        // set" below.
        let webhook_given = args.webhook_secret.is_some() || args.webhook_secret_file.is_some();
        let verify_given = args.verify_secret.is_some() || args.verify_secret_file.is_some();
        let account_token_given = args.account_token.is_some() || args.account_token_file.is_some();
        let webhook = long_secret(
            "webhook_secret",
            args.webhook_secret.take(),
            args.webhook_secret_file.take(),
            refuse,
        );
        let verify = long_secret(
            "verify_secret",
            args.verify_secret.take(),
            args.verify_secret_file.take(),
            refuse,
        );
        let webhook_previous = long_secret(
            "webhook_secret_previous",
            args.webhook_secret_previous.take(),
            args.webhook_secret_previous_file.take(),
            refuse,
        );
        if webhook_previous.is_some() && webhook.is_none() {
            refuse(Problem::unset(
                "webhook_secret",
                "MSGW_WEBHOOK_SECRET_PREVIOUS is set: a rotation needs the new secret",
            ));
        }
        let account_token = account_token(
            secret(
                "account_token",
                args.account_token.take(),
                args.account_token_file.take(),
                refuse,
            ),
            refuse,
        );
        if shared_store {
            required_when_shared(
                [
                    (
                        "webhook_secret",
                        webhook_given,
                        "verify each other's webhooks",
                    ),
                    (
                        "account_token",
                        account_token_given,
                        "verify each other's webhooks",
                    ),
                    (
                        "verify_secret",
                        verify_given,
                        "check each other's one-time codes",
                    ),
                ],
                refuse,
            );
        }
        Self {
            webhook,
            webhook_previous,
            verify,
            account_token_generated: account_token.is_none(),
            account_token: account_token
                .unwrap_or_else(|| SecretString::from(crate::process::secrets::random_token())),
            store_password,
        }
    }
}

/// Replicas sharing a store verify each other's hook tokens and check each other's
/// codes: a secret generated per start (or per replica) would make every webhook or
/// code of another replica's message a refusal. SQLite generates them and keeps them
/// next to the database; a shared store needs each one `given`.
fn required_when_shared(given: [(&str, bool, &str); 3], refuse: &mut impl FnMut(Problem)) {
    for (arg, given, why) in given {
        if !given {
            refuse(Problem::unset(
                arg,
                format!(
                    "a PostgreSQL store is shared by replicas, which must {why}: set it (or its _FILE variable) to the same value on every replica"
                ),
            ));
        }
    }
}

/// The account webhook token, if given and usable in a URL path: at least 16 of
/// A-Z a-z 0-9 - _ . ~.
fn account_token(
    given: Option<SecretString>,
    refuse: &mut impl FnMut(Problem),
) -> Option<SecretString> {
    given.filter(|s| {
        let s = s.expose_secret();
        let valid = s.len() >= 16
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.~".contains(&b));
        if !valid {
            refuse(Problem::secret(
                "account_token",
                s.len(),
                "must be at least 16 of A-Z a-z 0-9 - _ . ~",
            ));
        }
        valid
    })
}

/// The secret of option `arg` ([`secret`]), if it has at least 16 characters; a
/// problem of `arg` if it has fewer.
fn long_secret(
    arg: &str,
    value: Option<String>,
    file: Option<PathBuf>,
    refuse: &mut impl FnMut(Problem),
) -> Option<SecretString> {
    secret(arg, value, file, refuse).filter(|s| {
        let len = s.expose_secret().len();
        if len < 16 {
            refuse(Problem::secret(arg, len, "must be at least 16 characters"));
        }
        len >= 16
    })
}

/// The secret of option `arg`, given as its value or in the file of its `_FILE`
/// option ([`crate::process::secrets::read`]); a file that cannot be used is a problem.
pub(super) fn secret(
    arg: &str,
    value: Option<String>,
    file: Option<PathBuf>,
    refuse: &mut impl FnMut(Problem),
) -> Option<SecretString> {
    crate::process::secrets::read(value, file.as_deref()).unwrap_or_else(|e| {
        let shown = file.as_deref().map(|f| f.display().to_string());
        refuse(Problem::value(
            &format!("{arg}_file"),
            shown.unwrap_or_default(),
            format!("{e:#}"),
        ));
        None
    })
}
