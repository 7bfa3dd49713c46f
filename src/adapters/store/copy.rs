//! Moving from SQLite to PostgreSQL: copies a stopped msgw's SQLite file into an
//! empty PostgreSQL store, every table of it — the idempotency claims (a retry after
//! the move is still answered, never sent again), the messages reconcile tracks, the
//! event log with its cursors (subscribers resume where they were), verifications
//! (pending ones can still be checked), the fraud guard's counts and holds, the
//! suppression list and its decisions, the sandbox's account (not the leases: the stopped msgw holds none). A table or column it does not know (a schema it
//! was not written for) makes it refuse, naming them, before anything is written.

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use futures_util::TryStreamExt;
use sqlx::{PgPool, Postgres, Row, SqlitePool, Transaction};

use super::postgres::PgDb;
use super::sqlite::SqliteDb;
use super::{StoreError, is_shared};
use crate::core::domain::Cursor;

/// Every table of msgw's schema, in the order they are copied: `events` before
/// `messages`, so the trigger that tracks a message's status on each event finds no
/// message yet, and every message keeps the status it had.
pub const TABLES: &[&str] = &[
    "claims",
    "events",
    "messages",
    "sandbox_state",
    "sandbox_messages",
    "verifications",
    "verification_sends",
    "guard_codes",
    "guard_code_keys",
    "guard_trusted_keys",
    "guard_holds",
    "scheduled",
    "scheduled_ops",
    "suppressions",
    "consent",
    "seen_replies",
];

/// Tables of a database's own bookkeeping, whose rows are not copied, and why.
pub const BOOKKEEPING: &[(&str, &str)] = &[
    (
        "_sqlx_migrations",
        "each database records its own migrations",
    ),
    (
        "sqlite_sequence",
        "SQLite's newest cursor: PostgreSQL's event_head is set to it",
    ),
    ("event_head", "set to SQLite's newest cursor"),
    (
        "leases",
        "which replica does shared work now: the stopped msgw's would hold the new replicas off until they expire",
    ),
    (
        "upstream_rate",
        "the shared rate's last second (MSGW_UPSTREAM_RATE): PostgreSQL's migration makes its row, and SQLite keeps its rate in memory",
    ),
];

/// Columns only PostgreSQL has, left as a copied row's insert leaves them (NULL).
pub const POSTGRES_ONLY: &[(&str, &str)] = &[
    // Tells a retried claims group its own claims apart: only during that retry.
    ("claims", "claim_token"),
];

/// Rows read and written per statement.
const PAGE: usize = 1000;

/// What a copy moved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Copied {
    /// Rows copied per table, in [`TABLES`]' order.
    pub tables: Vec<(&'static str, u64)>,
    /// The newest cursor ever handed out (the PostgreSQL log continues after it).
    pub latest_cursor: Cursor,
}

impl Copied {
    /// Rows copied of `table`.
    pub fn rows(&self, table: &str) -> u64 {
        self.tables
            .iter()
            .find(|(name, _)| *name == table)
            .map_or(0, |(_, rows)| *rows)
    }
}

impl fmt::Display for Copied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rows: Vec<String> = self
            .tables
            .iter()
            .map(|(table, rows)| format!("{rows} {table}"))
            .collect();
        write!(
            f,
            "{}; the event log continues after cursor {}",
            rows.join(", "),
            self.latest_cursor
        )
    }
}

/// Opens the SQLite file `from` (which must exist) and the PostgreSQL store `to`
/// (migrating both), copies, and closes both. Past a pooler, the copy is written to
/// `to_direct`, PostgreSQL itself, which must be the place `to` leads to.
pub async fn run(
    from: &str,
    to: &str,
    to_direct: Option<&str>,
    password: Option<&secrecy::SecretString>,
) -> Result<Copied, StoreError> {
    let Some(path) = from.strip_prefix("sqlite://") else {
        return Err(StoreError::Config(format!(
            "copy from a sqlite://PATH store, not {:?}",
            from.split(':').next().unwrap_or_default()
        )));
    };
    let path = path.split('?').next().unwrap_or_default();
    if !std::path::Path::new(path).is_file() {
        return Err(StoreError::Config(format!("no SQLite store at {path}")));
    }
    if !is_shared(to) {
        return Err(StoreError::Config("copy to a postgres://... store".into()));
    }
    is_msgws(path).await?;
    let source = SqliteDb::open(from, Duration::ZERO).await?;
    let names = super::OptionNames::COPY;
    if let Some(direct) = to_direct {
        if !is_shared(direct) {
            return Err(StoreError::Config("copy to a postgres://... store".into()));
        }
        super::postgres::check_same_place(to, direct, password, &names).await?;
    }
    let mut target = super::StoreTarget::new(to_direct.unwrap_or(to));
    target.password = password.cloned();
    target.names = names;
    let target = PgDb::open(&target, Duration::ZERO).await?;
    let copied = sqlite_to_postgres(&source, &target).await;
    source.close().await;
    target.close().await;
    copied
}

/// Refuses, before anything opens it for writing (which would migrate it), a file that
/// is not an msgw store: empty, not SQLite, or without msgw's migrations and claims.
async fn is_msgws(path: &str) -> Result<(), StoreError> {
    let not_msgws = |why: &str| StoreError::Config(format!("{path} is not an msgw store: {why}"));
    if std::fs::metadata(path).map(|m| m.len()).unwrap_or(0) == 0 {
        return Err(not_msgws("the file is empty"));
    }
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(path)
        .read_only(true);
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await?;
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ('_sqlx_migrations', 'claims')",
    )
    .fetch_all(&pool)
    .await
    .map_err(|e| not_msgws(&e.to_string()))?;
    pool.close().await;
    if tables.len() < 2 {
        return Err(not_msgws("it has no msgw tables"));
    }
    Ok(())
}

/// Copies `from` (SQLite) into `to` (PostgreSQL), whose tables must be empty; everything
/// is written in one transaction, so a failed copy leaves the target empty. Stop msgw
/// before copying: what it writes meanwhile is not copied.
async fn sqlite_to_postgres(from: &SqliteDb, to: &PgDb) -> Result<Copied, StoreError> {
    let (source, target) = (&from.pool, &to.pool);
    let tables = plan(source, target).await?;
    refuse_unless_empty(target).await?;
    let mut tx = target.begin().await?;
    let mut copied = Copied {
        tables: Vec::with_capacity(tables.len()),
        latest_cursor: from.latest_cursor().await?,
    };
    for table in &tables {
        copied
            .tables
            .push((table.name, copy(source, &mut tx, table).await?));
    }
    sqlx::query("UPDATE event_head SET cursor = $1")
        .bind(super::rows::cursor_to_db(copied.latest_cursor))
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(copied)
}

/// A table to copy: the columns both databases have, with PostgreSQL's types.
struct Table {
    name: &'static str,
    columns: Vec<(String, Kind)>,
}

/// A column's type, as PostgreSQL names it.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Int,
    Real,
    Text,
    Bytes,
    Bool,
}

impl Kind {
    fn of(data_type: &str) -> Option<Self> {
        Some(match data_type {
            "bigint" | "integer" => Self::Int,
            "double precision" => Self::Real,
            "text" => Self::Text,
            "bytea" => Self::Bytes,
            "boolean" => Self::Bool,
            _ => return None,
        })
    }

    /// The array type `UNNEST` reads this column's values as.
    fn array(self) -> &'static str {
        match self {
            Self::Int => "BIGINT[]",
            Self::Real => "DOUBLE PRECISION[]",
            Self::Text => "TEXT[]",
            Self::Bytes => "BYTEA[]",
            Self::Bool => "BOOLEAN[]",
        }
    }
}

/// The tables and columns to copy, or the refusal that names what cannot be: a table
/// or column copy-store does not know, or one the two schemas do not share.
async fn plan(source: &SqlitePool, target: &PgPool) -> Result<Vec<Table>, StoreError> {
    let known: BTreeSet<&str> = TABLES
        .iter()
        .copied()
        .chain(BOOKKEEPING.iter().map(|(name, _)| *name))
        .collect();
    let source_tables: Vec<(String,)> =
        sqlx::query_as("SELECT name FROM sqlite_master WHERE type = 'table'")
            .fetch_all(source)
            .await?;
    let target_tables: Vec<(String,)> = sqlx::query_as(
        "SELECT table_name::TEXT FROM information_schema.tables
          WHERE table_schema = current_schema()",
    )
    .fetch_all(target)
    .await?;
    let mut unknown: BTreeSet<String> = source_tables
        .into_iter()
        .chain(target_tables)
        .map(|(name,)| name)
        .filter(|name| !known.contains(name.as_str()))
        .collect();
    let mut tables = Vec::with_capacity(TABLES.len());
    for &name in TABLES {
        let source_columns: Vec<(String,)> =
            sqlx::query_as("SELECT name FROM pragma_table_info($1)")
                .bind(name)
                .fetch_all(source)
                .await?;
        let target_columns: Vec<(String, String)> = sqlx::query_as(
            "SELECT column_name::TEXT, data_type::TEXT FROM information_schema.columns
              WHERE table_schema = current_schema() AND table_name = $1
              ORDER BY ordinal_position",
        )
        .bind(name)
        .fetch_all(target)
        .await?;
        let shared: BTreeSet<&str> = source_columns.iter().map(|(c,)| c.as_str()).collect();
        let mut columns = Vec::with_capacity(target_columns.len());
        for (column, data_type) in &target_columns {
            let postgres_only = POSTGRES_ONLY.contains(&(name, column.as_str()));
            match Kind::of(data_type) {
                Some(kind) if shared.contains(column.as_str()) => {
                    columns.push((column.clone(), kind));
                }
                _ if postgres_only => {}
                _ => {
                    unknown.insert(format!("{name}.{column}"));
                }
            }
        }
        let in_target: BTreeSet<&str> = target_columns.iter().map(|(c, _)| c.as_str()).collect();
        unknown.extend(
            shared
                .difference(&in_target)
                .map(|column| format!("{name}.{column}")),
        );
        tables.push(Table { name, columns });
    }
    if !unknown.is_empty() {
        let names: Vec<String> = unknown.into_iter().collect();
        return Err(StoreError::Config(format!(
            "copy-store cannot copy {}: its schema does not know them (copy with the msgw version that wrote the store)",
            names.join(", ")
        )));
    }
    Ok(tables)
}

/// Refuses a target that holds any row, or has handed out a cursor.
async fn refuse_unless_empty(target: &PgPool) -> Result<(), StoreError> {
    let mut holding = Vec::new();
    for table in TABLES {
        let sql = format!("SELECT EXISTS (SELECT 1 FROM {table})");
        let (any,): (bool,) = sqlx::query_as(&sql).fetch_one(target).await?;
        if any {
            holding.push(*table);
        }
    }
    let (head,): (i64,) = sqlx::query_as("SELECT cursor FROM event_head")
        .fetch_one(target)
        .await?;
    if head != 0 {
        holding.push("event_head");
    }
    if holding.is_empty() {
        return Ok(());
    }
    Err(StoreError::Config(format!(
        "the PostgreSQL store is not empty ({} hold data): msgw copies into a fresh database (or schema) only",
        holding.join(", ")
    )))
}

/// Copies the rows of `table`, [`PAGE`] at a time; how many.
async fn copy(
    source: &SqlitePool,
    tx: &mut Transaction<'_, Postgres>,
    table: &Table,
) -> Result<u64, StoreError> {
    let names: Vec<&str> = table.columns.iter().map(|(c, _)| c.as_str()).collect();
    let select = format!("SELECT {} FROM {}", names.join(", "), table.name);
    let arrays: Vec<String> = table
        .columns
        .iter()
        .enumerate()
        .map(|(i, (_, kind))| format!("${}::{}", i + 1, kind.array()))
        .collect();
    let insert = format!(
        "INSERT INTO {} ({}) SELECT * FROM UNNEST({})",
        table.name,
        names.join(", "),
        arrays.join(", ")
    );
    let mut rows = sqlx::query(&select).fetch(source);
    let mut page = Page::new(&table.columns);
    let mut copied = 0;
    while let Some(row) = rows.try_next().await? {
        page.push(&row)?;
        if page.len == PAGE {
            copied += page.write(&insert, tx).await?;
            page = Page::new(&table.columns);
        }
    }
    copied += page.write(&insert, tx).await?;
    Ok(copied)
}

/// Rows read from SQLite, as one array per column for `UNNEST`.
struct Page {
    columns: Vec<Column>,
    len: usize,
}

enum Column {
    Int(Vec<Option<i64>>),
    Real(Vec<Option<f64>>),
    Text(Vec<Option<String>>),
    Bytes(Vec<Option<Vec<u8>>>),
    Bool(Vec<Option<bool>>),
}

impl Page {
    fn new(columns: &[(String, Kind)]) -> Self {
        let columns = columns
            .iter()
            .map(|(_, kind)| match kind {
                Kind::Int => Column::Int(Vec::with_capacity(PAGE)),
                Kind::Real => Column::Real(Vec::with_capacity(PAGE)),
                Kind::Text => Column::Text(Vec::with_capacity(PAGE)),
                Kind::Bytes => Column::Bytes(Vec::with_capacity(PAGE)),
                Kind::Bool => Column::Bool(Vec::with_capacity(PAGE)),
            })
            .collect();
        Self { columns, len: 0 }
    }

    fn push(&mut self, row: &sqlx::sqlite::SqliteRow) -> Result<(), StoreError> {
        for (i, column) in self.columns.iter_mut().enumerate() {
            match column {
                Column::Int(values) => values.push(row.try_get(i)?),
                Column::Real(values) => values.push(row.try_get(i)?),
                Column::Text(values) => values.push(row.try_get(i)?),
                Column::Bytes(values) => values.push(row.try_get(i)?),
                Column::Bool(values) => values.push(row.try_get(i)?),
            }
        }
        self.len += 1;
        Ok(())
    }

    /// Inserts the page's rows with `insert`; how many.
    async fn write(
        self,
        insert: &str,
        tx: &mut Transaction<'_, Postgres>,
    ) -> Result<u64, StoreError> {
        if self.len == 0 {
            return Ok(0);
        }
        let mut query = sqlx::query(insert);
        for column in self.columns {
            query = match column {
                Column::Int(values) => query.bind(values),
                Column::Real(values) => query.bind(values),
                Column::Text(values) => query.bind(values),
                Column::Bytes(values) => query.bind(values),
                Column::Bool(values) => query.bind(values),
            };
        }
        Ok(query.execute(&mut **tx).await?.rows_affected())
    }
}
