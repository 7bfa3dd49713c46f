//! Reads of the event log and of the messages msgw sent, in SQL both databases speak.
//! Appends differ (cursor order across replicas): `sqlite/events.rs`,
//! `postgres/events.rs`.

use super::conn::{Conn, Sql};
use crate::adapters::store::StoreError;
use crate::adapters::store::rows::{
    EventRow, cursor_from_db, cursor_to_db, id_to_db, report_id_from_db,
};
use crate::core::domain::{ClientId, Cursor, LogEvent, StatusEvent};

/// The client id of a gateway message id, if msgw sent it.
pub(in crate::adapters::store) async fn client_id_of(
    conn: &mut Conn<'_>,
    msg_id: &str,
) -> Result<Option<ClientId>, StoreError> {
    let sql = Sql::new("SELECT client_id FROM messages WHERE msg_id = $1 LIMIT 1").bind(msg_id);
    let row: Option<(i64,)> = conn.fetch_optional(sql).await?;
    Ok(row.and_then(|(id,)| report_id_from_db(id)))
}

/// Up to `limit` events (statuses and list changes) with a cursor above `cursor`, in
/// cursor order.
pub(in crate::adapters::store) async fn after(
    conn: &mut Conn<'_>,
    cursor: Cursor,
    limit: u32,
) -> Result<Vec<LogEvent>, StoreError> {
    let sql = Sql::new("SELECT * FROM events WHERE cursor > $1 ORDER BY cursor LIMIT $2")
        .bind(cursor_to_db(cursor))
        .bind(i64::from(limit));
    let rows: Vec<EventRow> = conn.fetch_all(sql).await?;
    rows.into_iter().map(LogEvent::try_from).collect()
}

/// The final event of a message if one is retained, else its newest.
pub(in crate::adapters::store) async fn last_of(
    conn: &mut Conn<'_>,
    client_id: ClientId,
) -> Result<Option<StatusEvent>, StoreError> {
    let sql = Sql::new(
        "SELECT * FROM events WHERE client_id = $1 AND kind = 'status'
          ORDER BY is_final DESC, cursor DESC LIMIT 1",
    )
    .bind(id_to_db(client_id.get()));
    let row: Option<EventRow> = conn.fetch_optional(sql).await?;
    row.map(StatusEvent::try_from).transpose()
}

/// The oldest retained cursor, if any event is retained.
pub(in crate::adapters::store) async fn oldest_cursor(
    conn: &mut Conn<'_>,
) -> Result<Option<Cursor>, StoreError> {
    let (min,): (Option<i64>,) = conn
        .fetch_one(Sql::new("SELECT MIN(cursor) FROM events"))
        .await?;
    // A cursor that cannot be one is a corrupt store, not "empty".
    min.map(cursor_from_db).transpose()
}
