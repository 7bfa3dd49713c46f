//! Moving from SQLite to PostgreSQL: copies a stopped msgw's SQLite file into an
//! empty PostgreSQL store, with everything that keeps msgw's promises across the
//! move — the idempotency claims (a retry after the move is still answered, never
//! sent again), the messages reconcile tracks, and the event log with its cursors
//! (subscribers resume where they were).

use super::{PgStore, SqliteStore, StoreError};

/// Opens the SQLite file `from` (which must exist) and the PostgreSQL store `to`
/// (migrating both), copies, and closes both.
pub async fn run(
    from: &str,
    to: &str,
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
    if !super::is_shared(to) {
        return Err(StoreError::Config("copy to a postgres://... store".into()));
    }
    let source = SqliteStore::open(from, std::time::Duration::ZERO).await?;
    let target = PgStore::open(to, password, std::time::Duration::ZERO).await?;
    let copied = sqlite_to_postgres(&source, &target).await;
    super::Store::close(&source).await;
    super::Store::close(&target).await;
    copied
}

/// Rows copied per statement.
const PAGE: i64 = 1000;

/// What a copy moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Copied {
    /// Idempotency claims.
    pub claims: u64,
    /// Messages tracked for reconcile.
    pub messages: u64,
    /// Events, cursors kept.
    pub events: u64,
    /// The newest cursor ever handed out (the PostgreSQL log continues after it).
    pub latest_cursor: crate::domain::Cursor,
}

type ClaimTuple = (
    i64,
    Vec<u8>,
    i64,
    String,
    i64,
    Option<i64>,
    Option<String>,
    Option<i64>,
    Option<String>,
    bool,
    Option<String>,
    Option<String>,
    Option<i64>,
    i64,
    Option<i64>,
);
type MessageTuple = (
    i64,
    String,
    String,
    i64,
    i64,
    Option<String>,
    bool,
    Option<i64>,
    i64,
);
/// A row of `events` as copied: a tuple struct, since sqlx reads tuples of at most 16.
#[derive(sqlx::FromRow)]
struct EventTuple(
    i64,
    String,
    i64,
    Option<String>,
    Option<String>,
    Option<String>,
    bool,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<f64>,
    Option<String>,
    String,
    i64,
    String,
    bool,
    Option<String>,
);

/// Copies `from` (SQLite) into `to` (PostgreSQL), which must hold no claims, messages
/// or events yet; everything is written in one transaction, so a failed copy leaves
/// the target empty. Stop msgw before copying: what it writes meanwhile is not copied.
pub async fn sqlite_to_postgres(from: &SqliteStore, to: &PgStore) -> Result<Copied, StoreError> {
    let (source, target) = (&from.pool, &to.pool);
    let (rows,): (i64,) = sqlx::query_as(
        "SELECT (SELECT COUNT(*) FROM claims) + (SELECT COUNT(*) FROM messages)
              + (SELECT COUNT(*) FROM events) + (SELECT cursor FROM event_head)",
    )
    .fetch_one(target)
    .await?;
    if rows != 0 {
        return Err(StoreError::Config(
            "the PostgreSQL store is not empty: msgw copies into a fresh database (or schema) only"
                .into(),
        ));
    }
    let mut tx = target.begin().await?;
    let mut copied = Copied::default();
    // Each table in pages, in key order (the key is every row's first column).
    macro_rules! copy_table {
        ($row:ty, $sql:literal, $insert:ident, $count:expr) => {{
            let mut after = i64::MIN;
            loop {
                let page: Vec<$row> = sqlx::query_as($sql)
                    .bind(after)
                    .bind(PAGE)
                    .fetch_all(source)
                    .await?;
                let Some(last) = page.last().map(|r| r.0) else {
                    break;
                };
                $count += page.len() as u64;
                after = last;
                $insert(&mut tx, page).await?;
            }
        }};
    }
    copy_table!(
        ClaimTuple,
        "SELECT client_id, fingerprint, attempt, state, claimed_at_ms, settled_at_ms, msg_id,
                parts, payload, recovered, reason, caller, settle_until_ms, lookups, next_lookup_ms
           FROM claims WHERE client_id > ? ORDER BY client_id LIMIT ?",
        insert_claims,
        copied.claims
    );
    copy_table!(
        EventTuple,
        "SELECT cursor, dedup_key, client_id, msg_id, channel, status, success, error, updated,
                reply, duration_s, request_id, replies, received_at_ms, source, is_final, caller
           FROM events WHERE cursor > ? ORDER BY cursor LIMIT ?",
        insert_events,
        copied.events
    );
    // After the events: their trigger finds no message yet, so each message keeps the
    // status it had.
    copy_table!(
        MessageTuple,
        "SELECT client_id, msg_id, channel, sent_at_ms, lifetime_s, last_status, is_final,
                next_poll_ms, polls
           FROM messages WHERE client_id > ? ORDER BY client_id LIMIT ?",
        insert_messages,
        copied.messages
    );
    copied.latest_cursor = super::Store::latest_cursor(from).await?;
    sqlx::query("UPDATE event_head SET cursor = $1")
        .bind(super::rows::cursor_to_db(copied.latest_cursor))
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(copied)
}

type PgTx<'a> = sqlx::Transaction<'a, sqlx::Postgres>;

/// Splits rows into one vector per column, for `UNNEST`.
macro_rules! columns {
    ($rows:expr; $($column:ident: $index:tt),+ $(,)?) => {
        $( let mut $column = Vec::with_capacity($rows.len()); )+
        for row in $rows {
            $( $column.push(row.$index); )+
        }
    };
}

async fn insert_claims(tx: &mut PgTx<'_>, rows: Vec<ClaimTuple>) -> Result<(), StoreError> {
    columns!(rows; id: 0, fingerprint: 1, attempt: 2, state: 3, claimed: 4, settled: 5,
             msg_id: 6, parts: 7, payload: 8, recovered: 9, reason: 10, caller: 11,
             settle_until: 12, lookups: 13, next_lookup: 14);
    sqlx::query(
        "INSERT INTO claims (client_id, fingerprint, attempt, state, claimed_at_ms, settled_at_ms,
                             msg_id, parts, payload, recovered, reason, caller, settle_until_ms,
                             lookups, next_lookup_ms)
         SELECT * FROM UNNEST($1::BIGINT[], $2::BYTEA[], $3::BIGINT[], $4::TEXT[], $5::BIGINT[],
                              $6::BIGINT[], $7::TEXT[], $8::BIGINT[], $9::TEXT[], $10::BOOLEAN[],
                              $11::TEXT[], $12::TEXT[], $13::BIGINT[], $14::BIGINT[],
                              $15::BIGINT[])",
    )
    .bind(id)
    .bind(fingerprint)
    .bind(attempt)
    .bind(state)
    .bind(claimed)
    .bind(settled)
    .bind(msg_id)
    .bind(parts)
    .bind(payload)
    .bind(recovered)
    .bind(reason)
    .bind(caller)
    .bind(settle_until)
    .bind(lookups)
    .bind(next_lookup)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

async fn insert_messages(tx: &mut PgTx<'_>, rows: Vec<MessageTuple>) -> Result<(), StoreError> {
    columns!(rows; id: 0, msg_id: 1, channel: 2, sent_at: 3, lifetime: 4, last_status: 5,
             is_final: 6, next_poll: 7, polls: 8);
    sqlx::query(
        "INSERT INTO messages (client_id, msg_id, channel, sent_at_ms, lifetime_s, last_status,
                               is_final, next_poll_ms, polls)
         SELECT * FROM UNNEST($1::BIGINT[], $2::TEXT[], $3::TEXT[], $4::BIGINT[], $5::BIGINT[],
                              $6::TEXT[], $7::BOOLEAN[], $8::BIGINT[], $9::BIGINT[])",
    )
    .bind(id)
    .bind(msg_id)
    .bind(channel)
    .bind(sent_at)
    .bind(lifetime)
    .bind(last_status)
    .bind(is_final)
    .bind(next_poll)
    .bind(polls)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

async fn insert_events(tx: &mut PgTx<'_>, rows: Vec<EventTuple>) -> Result<(), StoreError> {
    columns!(rows; cursor: 0, dedup_key: 1, client_id: 2, msg_id: 3, channel: 4, status: 5,
             success: 6, error: 7, updated: 8, reply: 9, duration_s: 10, request_id: 11,
             replies: 12, received_at_ms: 13, source: 14, is_final: 15, caller: 16);
    sqlx::query(
        "INSERT INTO events (cursor, dedup_key, client_id, msg_id, channel, status, success, error,
                             updated, reply, duration_s, request_id, replies, received_at_ms,
                             source, is_final, caller)
         SELECT * FROM UNNEST($1::BIGINT[], $2::TEXT[], $3::BIGINT[], $4::TEXT[], $5::TEXT[],
                              $6::TEXT[], $7::BOOLEAN[], $8::TEXT[], $9::TEXT[], $10::TEXT[],
                              $11::DOUBLE PRECISION[], $12::TEXT[], $13::TEXT[], $14::BIGINT[],
                              $15::TEXT[], $16::BOOLEAN[], $17::TEXT[])",
    )
    .bind(cursor)
    .bind(dedup_key)
    .bind(client_id)
    .bind(msg_id)
    .bind(channel)
    .bind(status)
    .bind(success)
    .bind(error)
    .bind(updated)
    .bind(reply)
    .bind(duration_s)
    .bind(request_id)
    .bind(replies)
    .bind(received_at_ms)
    .bind(source)
    .bind(is_final)
    .bind(caller)
    .execute(&mut **tx)
    .await?;
    Ok(())
}
