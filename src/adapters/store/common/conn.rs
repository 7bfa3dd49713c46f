//! How one statement runs on either database: [`Sql`] is a statement's text (`$N`
//! placeholders, which both databases read) with its values, and [`Conn`] a connection
//! of either store, whose methods bind the values and run the statement on it. The
//! SQL written once for both databases is written against these; everything else
//! about a database stays in `sqlite/` or `postgres/`.

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::sqlite::{SqliteArguments, SqliteRow};
use sqlx::{Arguments, FromRow, PgConnection, Postgres, Sqlite, SqliteConnection, Transaction};

use crate::adapters::store::StoreError;

/// A value bound to a placeholder: the column types msgw stores.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::adapters::store) enum Value {
    /// BIGINT (SQLite: INTEGER).
    Int(Option<i64>),
    /// TEXT.
    Text(Option<String>),
    /// BYTEA (SQLite: BLOB).
    Bytes(Option<Vec<u8>>),
    /// BOOLEAN (SQLite: INTEGER 0 or 1).
    Bool(bool),
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Self::Int(Some(v))
    }
}

impl From<Option<i64>> for Value {
    fn from(v: Option<i64>) -> Self {
        Self::Int(v)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Self::Text(Some(v.to_owned()))
    }
}

impl From<String> for Value {
    fn from(v: String) -> Self {
        Self::Text(Some(v))
    }
}

impl From<Option<String>> for Value {
    fn from(v: Option<String>) -> Self {
        Self::Text(v)
    }
}

impl From<&String> for Value {
    fn from(v: &String) -> Self {
        Self::Text(Some(v.clone()))
    }
}

impl From<Option<&str>> for Value {
    fn from(v: Option<&str>) -> Self {
        Self::Text(v.map(str::to_owned))
    }
}

impl From<&[u8]> for Value {
    fn from(v: &[u8]) -> Self {
        Self::Bytes(Some(v.to_vec()))
    }
}

impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Self {
        Self::Bytes(Some(v))
    }
}

impl From<Option<&[u8]>> for Value {
    fn from(v: Option<&[u8]>) -> Self {
        Self::Bytes(v.map(<[u8]>::to_vec))
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Self::Bool(v)
    }
}

/// A statement both databases speak, with the values of its placeholders in order.
#[derive(Debug, Clone)]
pub(in crate::adapters::store) struct Sql {
    text: &'static str,
    values: Vec<Value>,
}

impl Sql {
    /// The statement `text`, no value bound yet.
    pub(in crate::adapters::store) fn new(text: &'static str) -> Self {
        Self {
            text,
            values: Vec::new(),
        }
    }

    /// Binds the next placeholder.
    pub(in crate::adapters::store) fn bind(mut self, value: impl Into<Value>) -> Self {
        self.values.push(value.into());
        self
    }

    fn sqlite(self) -> Result<(&'static str, SqliteArguments<'static>), StoreError> {
        let mut args = SqliteArguments::default();
        for value in self.values {
            match value {
                Value::Int(v) => args.add(v),
                Value::Text(v) => args.add(v),
                Value::Bytes(v) => args.add(v),
                Value::Bool(v) => args.add(v),
            }
            .map_err(sqlx::Error::Encode)?;
        }
        Ok((self.text, args))
    }

    fn postgres(self) -> Result<(&'static str, PgArguments), StoreError> {
        let mut args = PgArguments::default();
        for value in self.values {
            match value {
                Value::Int(v) => args.add(v),
                Value::Text(v) => args.add(v),
                Value::Bytes(v) => args.add(v),
                Value::Bool(v) => args.add(v),
            }
            .map_err(sqlx::Error::Encode)?;
        }
        Ok((self.text, args))
    }
}

/// A row type both databases read (`#[derive(sqlx::FromRow)]`, or a tuple).
pub(in crate::adapters::store) trait Row:
    for<'r> FromRow<'r, SqliteRow> + for<'r> FromRow<'r, PgRow> + Send + Unpin
{
}

impl<T> Row for T where T: for<'r> FromRow<'r, SqliteRow> + for<'r> FromRow<'r, PgRow> + Send + Unpin
{}

/// How PostgreSQL's statements are prepared on a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::adapters::store) enum Statements {
    /// Named, prepared once per connection and kept: the connection is one server
    /// session from its start to its end (a direct connection, or a pooler in session
    /// mode).
    Kept,
    /// Unnamed, prepared again on each use: behind a pooler in transaction mode a
    /// connection's next transaction may run on another server session, where a named
    /// statement is missing or, worse, is another client's of the same name.
    Unnamed,
}

impl Statements {
    /// Whether sqlx keeps the statement prepared (`Query::persistent`).
    pub(in crate::adapters::store) fn kept(self) -> bool {
        self == Self::Kept
    }
}

/// A connection of either store: a pooled one, or the one a transaction runs on.
pub(in crate::adapters::store) enum Conn<'c> {
    /// SQLite's.
    Sqlite(&'c mut SqliteConnection),
    /// PostgreSQL's, and how statements are prepared on it.
    Postgres(&'c mut PgConnection, Statements),
}

impl Conn<'_> {
    /// Whether this is a PostgreSQL connection (for the few statements written for it
    /// alone).
    pub(in crate::adapters::store) fn is_postgres(&self) -> bool {
        matches!(self, Self::Postgres(..))
    }

    /// Runs `sql`; the rows it changed.
    pub(in crate::adapters::store) async fn execute(
        &mut self,
        sql: Sql,
    ) -> Result<u64, StoreError> {
        Ok(match self {
            Self::Sqlite(conn) => {
                let (text, args) = sql.sqlite()?;
                let done = sqlx::query_with(text, args).execute(&mut **conn).await?;
                done.rows_affected()
            }
            Self::Postgres(conn, statements) => {
                let (text, args) = sql.postgres()?;
                let query = sqlx::query_with(text, args).persistent(statements.kept());
                let done = query.execute(&mut **conn).await?;
                done.rows_affected()
            }
        })
    }

    /// Runs `sql`; its first row, if any.
    pub(in crate::adapters::store) async fn fetch_optional<T: Row>(
        &mut self,
        sql: Sql,
    ) -> Result<Option<T>, StoreError> {
        Ok(match self {
            Self::Sqlite(conn) => {
                let (text, args) = sql.sqlite()?;
                let query = sqlx::query_as_with(text, args);
                query.fetch_optional(&mut **conn).await?
            }
            Self::Postgres(conn, statements) => {
                let (text, args) = sql.postgres()?;
                let query = sqlx::query_as_with(text, args).persistent(statements.kept());
                query.fetch_optional(&mut **conn).await?
            }
        })
    }

    /// Runs `sql`, which returns exactly one row.
    pub(in crate::adapters::store) async fn fetch_one<T: Row>(
        &mut self,
        sql: Sql,
    ) -> Result<T, StoreError> {
        self.fetch_optional(sql)
            .await?
            .ok_or_else(|| sqlx::Error::RowNotFound.into())
    }

    /// Runs `sql`; its rows.
    pub(in crate::adapters::store) async fn fetch_all<T: Row>(
        &mut self,
        sql: Sql,
    ) -> Result<Vec<T>, StoreError> {
        Ok(match self {
            Self::Sqlite(conn) => {
                let (text, args) = sql.sqlite()?;
                let query = sqlx::query_as_with(text, args);
                query.fetch_all(&mut **conn).await?
            }
            Self::Postgres(conn, statements) => {
                let (text, args) = sql.postgres()?;
                let query = sqlx::query_as_with(text, args).persistent(statements.kept());
                query.fetch_all(&mut **conn).await?
            }
        })
    }

    /// Takes each of `locks` (a lock and its key), in their order, as [`Conn::lock`]
    /// does, in one statement: one round trip on PostgreSQL however many.
    pub(in crate::adapters::store) async fn lock_all(
        &mut self,
        locks: &[(Lock, String)],
    ) -> Result<(), StoreError> {
        let Self::Postgres(conn, statements) = self else {
            return Ok(());
        };
        if locks.is_empty() {
            return Ok(());
        }
        let classes: Vec<&str> = locks.iter().map(|(lock, _)| lock.class()).collect();
        let keys: Vec<&str> = locks.iter().map(|(_, key)| key.as_str()).collect();
        let numeric: Vec<bool> = locks.iter().map(|(lock, _)| *lock == Lock::Key).collect();
        // A function scan yields its rows in the arrays' order: the locks are taken in it.
        sqlx::query(
            "SELECT count(pg_advisory_xact_lock(hashtext(l.class),
                          CASE WHEN l.numeric THEN l.key::int4 ELSE hashtext(l.key) END))
               FROM UNNEST($1::text[], $2::text[], $3::bool[]) AS l (class, key, numeric)",
        )
        .persistent(statements.kept())
        .bind(&classes)
        .bind(&keys)
        .bind(&numeric)
        .execute(&mut **conn)
        .await?;
        Ok(())
    }

    /// Makes transactions that take `lock` with the same `key` take turns, until this
    /// one ends: across replicas, with PostgreSQL's advisory locks. SQLite needs none:
    /// every transaction that writes holds the file's one write lock from its start.
    pub(in crate::adapters::store) async fn lock(
        &mut self,
        lock: Lock,
        key: impl ToString,
    ) -> Result<(), StoreError> {
        match self {
            Self::Sqlite(_) => Ok(()),
            Self::Postgres(..) => {
                let sql = Sql::new(lock.postgres()).bind(key.to_string());
                self.execute(sql).await.map(drop)
            }
        }
    }
}

/// What a transaction locks before it reads what it will decide on. Taken in this
/// order when a transaction takes several (a start, then its range, its region of a
/// shared calling code (`1/JM`), its calling code's figures (each a `Range` lock on
/// its name), keys by
/// [`crate::adapters::store::guard::key_lock`], the calling code's budget), so two never
/// wait on each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::adapters::store) enum Lock {
    /// Starts of a number: two replicas cannot both see room under its limit.
    Start,
    /// The fraud guard's judgement of a range (or of a region, or a whole calling code).
    Range,
    /// The count of a caller-supplied key (by its lock number).
    Key,
    /// The count of a calling code.
    Country,
}

impl Lock {
    /// The lock's class, the first of its two keys (hashed).
    fn class(self) -> &'static str {
        match self {
            Self::Start => "msgw.verifications",
            Self::Range => "msgw.guard.range",
            Self::Key => "msgw.guard.key",
            Self::Country => "msgw.guard.country",
        }
    }

    /// PostgreSQL's statement (`$1`: the key). The two-key form keeps these locks apart
    /// from single-key ones (sqlx's migration lock).
    fn postgres(self) -> &'static str {
        match self {
            Self::Start => {
                "SELECT pg_advisory_xact_lock(hashtext('msgw.verifications'), hashtext($1::text))"
            }
            Self::Range => {
                "SELECT pg_advisory_xact_lock(hashtext('msgw.guard.range'), hashtext($1))"
            }
            Self::Key => "SELECT pg_advisory_xact_lock(hashtext('msgw.guard.key'), $1::int4)",
            Self::Country => {
                "SELECT pg_advisory_xact_lock(hashtext('msgw.guard.country'), hashtext($1))"
            }
        }
    }
}

/// A connection taken from either store's pool, returned to it when dropped.
pub(in crate::adapters::store) enum Pooled {
    /// SQLite's.
    Sqlite(PoolConnection<Sqlite>),
    /// PostgreSQL's.
    Postgres(PgPooled),
}

impl Pooled {
    /// The connection, to run statements on.
    pub(in crate::adapters::store) fn conn(&mut self) -> Conn<'_> {
        match self {
            Self::Sqlite(conn) => Conn::Sqlite(conn),
            Self::Postgres(conn) => {
                let statements = conn.statements();
                Conn::Postgres(conn, statements)
            }
        }
    }

    /// Keeps what was written on it (see [`PgPooled::finish`]).
    pub(in crate::adapters::store) async fn finish(self) -> Result<(), StoreError> {
        match self {
            Self::Sqlite(_) => Ok(()),
            Self::Postgres(conn) => conn.finish().await,
        }
    }
}

/// A connection of PostgreSQL's pool, to run statements on outside a transaction of
/// the caller's.
pub(in crate::adapters::store) enum PgPooled {
    /// Each statement commits as it runs.
    Kept(PoolConnection<Postgres>),
    /// Behind a pooler in transaction mode: a transaction even to read, so that each
    /// statement's messages (sqlx prepares, then binds and executes) reach one server
    /// session. Rolled back when dropped; [`PgPooled::finish`] commits it.
    InTransaction(Transaction<'static, Postgres>),
}

impl PgPooled {
    /// How statements are prepared on it.
    pub(in crate::adapters::store) fn statements(&self) -> Statements {
        match self {
            Self::Kept(_) => Statements::Kept,
            Self::InTransaction(_) => Statements::Unnamed,
        }
    }

    /// Keeps what was written on it: commits the transaction behind a pooler in
    /// transaction mode (elsewhere each statement committed as it ran).
    pub(in crate::adapters::store) async fn finish(self) -> Result<(), StoreError> {
        if let Self::InTransaction(tx) = self {
            tx.commit().await?;
        }
        Ok(())
    }
}

impl std::ops::Deref for PgPooled {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        match self {
            Self::Kept(conn) => conn,
            Self::InTransaction(tx) => tx,
        }
    }
}

impl std::ops::DerefMut for PgPooled {
    fn deref_mut(&mut self) -> &mut PgConnection {
        match self {
            Self::Kept(conn) => conn,
            Self::InTransaction(tx) => tx,
        }
    }
}

/// A transaction of either store; rolled back when dropped uncommitted.
pub(in crate::adapters::store) enum Tx<'c> {
    /// SQLite's.
    Sqlite(Transaction<'c, Sqlite>),
    /// PostgreSQL's, and how statements are prepared on it.
    Postgres(Transaction<'c, Postgres>, Statements),
}

impl Tx<'_> {
    /// The transaction's connection, to run statements on.
    pub(in crate::adapters::store) fn conn(&mut self) -> Conn<'_> {
        match self {
            Self::Sqlite(tx) => Conn::Sqlite(tx),
            Self::Postgres(tx, statements) => Conn::Postgres(tx, *statements),
        }
    }

    /// Commits it.
    pub(in crate::adapters::store) async fn commit(self) -> Result<(), StoreError> {
        match self {
            Self::Sqlite(tx) => tx.commit().await?,
            Self::Postgres(tx, _) => tx.commit().await?,
        }
        Ok(())
    }
}
