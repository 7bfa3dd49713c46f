//! What a server session of msgw's starts with. A pooler (PgBouncer) refuses startup
//! parameters it does not know (`options`, `extra_float_digits`), so msgw sends none:
//! the settings a store URL asks for with `options=-c name=value` are set with
//! `set_config` once each new connection is open instead.

use std::str::FromStr;

use secrecy::{ExposeSecret, SecretString};
use sqlx::PgConnection;
use sqlx::postgres::{PgConnectOptions, PgRow};

use crate::adapters::store::StoreError;

/// The one row `sql` answers on a connection of its own, its settings made: by the
/// simple protocol (no statement prepared, which a pooler in transaction mode could
/// hand to another client's session).
pub(super) async fn one_row(
    options: &PgConnectOptions,
    settings: &SessionSettings,
    sql: &'static str,
) -> Result<PgRow, StoreError> {
    use sqlx::Connection;
    let mut conn = PgConnection::connect_with(options).await?;
    settings.apply(&mut conn).await?;
    let row = sqlx::raw_sql(sql).fetch_one(&mut conn).await?;
    let _ = conn.close().await;
    Ok(row)
}

/// The database and the schema (`None`: no schema of the search path exists) that a
/// connection lands in.
pub(super) async fn place(
    options: &PgConnectOptions,
    settings: &SessionSettings,
) -> Result<(String, Option<String>), StoreError> {
    use sqlx::Row;
    let row = one_row(
        options,
        settings,
        "SELECT current_database(), current_schema()",
    )
    .await?;
    Ok((row.try_get(0)?, row.try_get(1)?))
}

/// Settings made on each new connection, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct SessionSettings(Vec<(String, String)>);

impl SessionSettings {
    /// These settings, then `name` set to `value`.
    pub(super) fn and(mut self, name: &str, value: &str) -> Self {
        self.0.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Whether there is none.
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The settings as `name=value`, for messages.
    pub(super) fn describe(&self) -> String {
        let pairs: Vec<String> = self.0.iter().map(|(n, v)| format!("{n}={v}")).collect();
        pairs.join(" ")
    }

    /// Makes them on `conn`, for the rest of its session.
    pub(super) async fn apply(&self, conn: &mut PgConnection) -> Result<(), sqlx::Error> {
        for (name, value) in &self.0 {
            sqlx::query("SELECT set_config($1, $2, false)")
                .persistent(false)
                .bind(name)
                .bind(value)
                .execute(&mut *conn)
                .await?;
        }
        Ok(())
    }
}

/// The connect options of a `postgres://` URL (`password`, when given, replacing one in
/// it), with no startup parameter a pooler refuses, and the settings its `options`
/// asked for. `what` names the URL's option in errors (`MSGW_STORE_URL`).
pub(super) fn connect_options(
    what: &str,
    url: &str,
    password: Option<&SecretString>,
) -> Result<(PgConnectOptions, SessionSettings), StoreError> {
    let mut parsed = url::Url::parse(url)
        .map_err(|e| StoreError::Config(format!("{what} is not a URL: {e}")))?;
    let mut options = None;
    let rest: Vec<(String, String)> = parsed
        .query_pairs()
        .filter_map(|(k, v)| {
            if k == "options" {
                options = Some(v.into_owned());
                None
            } else {
                Some((k.into_owned(), v.into_owned()))
            }
        })
        .collect();
    if options.is_some() {
        if rest.is_empty() {
            parsed.set_query(None);
        } else {
            parsed.query_pairs_mut().clear().extend_pairs(rest);
        }
    }
    let settings = match options {
        Some(options) => parse_options(&options)
            .map_err(|e| StoreError::Config(format!("{what}'s options={options:?}: {e}")))?,
        None => SessionSettings::default(),
    };
    let mut connect = PgConnectOptions::from_str(parsed.as_str())?
        // A startup parameter PgBouncer refuses; PostgreSQL's own default (1, exact
        // output since PostgreSQL 12) is what msgw needs, and sqlx reads floats in
        // binary anyway.
        .extra_float_digits(None);
    // What is left of `options` came from libpq's PGOPTIONS in msgw's environment,
    // which sqlx reads too and would send at connect.
    if let Some(options) = connect.get_options() {
        return Err(StoreError::Config(format!(
            "PGOPTIONS is set in msgw's environment ({options:?}): it would be sent at connect, which a pooler refuses; unset it, and give the settings in {what}'s options instead (msgw sets those once connected)"
        )));
    }
    // `msgw` in pg_stat_activity, unless the URL names the connections otherwise.
    if connect.get_application_name().is_none() {
        connect = connect.application_name("msgw");
    }
    if let Some(password) = password {
        connect = connect.password(password.expose_secret());
    }
    Ok((connect, settings))
}

/// The settings of a libpq `options` string: `-c name=value`, `-cname=value` or
/// `--name=value`, separated by spaces (a backslash keeps the next character).
fn parse_options(options: &str) -> Result<SessionSettings, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut chars = options.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => word.extend(chars.next()),
            c if c.is_whitespace() => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    let mut settings = SessionSettings::default();
    let mut words = words.into_iter();
    while let Some(word) = words.next() {
        let setting = if word == "-c" {
            words
                .next()
                .ok_or_else(|| "`-c` without a setting after it".to_owned())?
        } else if let Some(setting) = word.strip_prefix("--").or(word.strip_prefix("-c")) {
            setting.to_owned()
        } else {
            return Err(format!(
                "{word:?} is not a setting: msgw takes `-c name=value` settings only"
            ));
        };
        let Some((name, value)) = setting.split_once('=') else {
            return Err(format!("{setting:?} is not name=value"));
        };
        if name.is_empty() {
            return Err(format!("{setting:?} has no name"));
        }
        settings = settings.and(name, value);
    }
    Ok(settings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_urls_options_become_settings_and_leave_the_startup_packet() {
        let (options, settings) = connect_options(
            "MSGW_STORE_URL",
            "postgres://msgw@db:6432/msgw?options=-c%20search_path%3Dmsgw%20-cstatement_timeout%3D5s&sslmode=prefer",
            None,
        )
        .unwrap();
        assert_eq!(options.get_options(), None);
        assert_eq!(options.get_port(), 6432);
        assert_eq!(options.get_database(), Some("msgw"));
        assert_eq!(options.get_application_name(), Some("msgw"));
        assert_eq!(
            settings,
            SessionSettings::default()
                .and("search_path", "msgw")
                .and("statement_timeout", "5s")
        );
    }

    #[test]
    fn option_strings_are_read_as_libpq_reads_them() {
        let read = |s: &str| parse_options(s).map(|s| s.describe());
        assert_eq!(read("--search_path=a\\ b").unwrap(), "search_path=a b");
        assert_eq!(read("  -c  x=1   -cy=2 ").unwrap(), "x=1 y=2");
        assert_eq!(read("").unwrap(), "");
        for bad in ["-c", "-c x", "-e", "search_path=x", "-c =1"] {
            assert!(read(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_url_without_options_keeps_its_parameters() {
        let (options, settings) = connect_options(
            "MSGW_STORE_URL",
            "postgres://u:p@h/d?application_name=mine",
            None,
        )
        .unwrap();
        assert!(settings.is_empty());
        assert_eq!(options.get_application_name(), Some("mine"));
    }
}
