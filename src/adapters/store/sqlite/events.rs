//! SQLite's event appends: duplicates found first, then one multi-row insert whose
//! cursors SQLite hands out (the file's one writer appends in commit order).

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::adapters::store::StoreError;
use crate::adapters::store::rows::{
    callers_by_id, cursor_from_db, id_to_db, ms, replies_to_json, report_id_to_db, row_chunks,
};
use crate::core::domain::{CallerName, ClientId, NewEvent, StatusEvent};

/// Appends `events` in `tx`, in chunks: each unless stored already (`None`).
pub(super) async fn append(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    events: &[NewEvent],
) -> Result<Vec<Option<StatusEvent>>, StoreError> {
    let mut stored = Vec::with_capacity(events.len());
    for chunk in row_chunks(events) {
        stored.extend(insert_events(tx, chunk).await?);
    }
    Ok(stored)
}

/// Inserts events with one multi-row statement; duplicates (already stored, or twice in
/// `events`) come back as `None`. Duplicates are found first and never inserted: an
/// `INSERT` that conflicts would still use up a cursor, and a gap in the cursors costs
/// every live subscriber a replay from the store.
async fn insert_events(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    events: &[NewEvent],
) -> Result<Vec<Option<StatusEvent>>, StoreError> {
    let keys: Vec<String> = events.iter().map(NewEvent::dedup_key).collect();
    let mut query = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
        "SELECT dedup_key FROM events WHERE dedup_key IN (",
    );
    let mut list = query.separated(", ");
    for key in &keys {
        list.push_bind(key.as_str());
    }
    query.push(")");
    let stored: Vec<(String,)> = query.build_query_as().fetch_all(&mut **tx).await?;
    let mut seen: HashSet<&str> = stored.iter().map(|(k,)| k.as_str()).collect();
    let fresh: Vec<(&NewEvent, &str)> = events
        .iter()
        .zip(&keys)
        .filter(|(_, key)| seen.insert(key.as_str()))
        .map(|(event, key)| (event, key.as_str()))
        .collect();
    let mut cursors: HashMap<String, i64> = HashMap::new();
    let callers = callers_of(tx, fresh.iter().filter_map(|(e, _)| e.report.client_id)).await?;
    if !fresh.is_empty() {
        let mut query = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
            "INSERT INTO events (dedup_key, client_id, msg_id, channel, status, success, error,
                                 updated, reply, duration_s, request_id, replies,
                                 received_at_ms, source, is_final, caller) ",
        );
        query.push_values(&fresh, |mut row, (event, key)| {
            let r = &event.report;
            row.push_bind(*key)
                .push_bind(report_id_to_db(r.client_id))
                .push_bind(r.msg_id.as_deref())
                .push_bind(r.channel_raw.as_deref())
                .push_bind(r.status.as_ref().map(|s| s.raw.as_str()))
                .push_bind(r.success)
                .push_bind(r.error.as_deref())
                .push_bind(r.updated.map(|u| u.to_rfc3339()))
                .push_bind(r.reply.as_deref())
                .push_bind(r.duration_secs)
                .push_bind(r.request_id.as_deref())
                .push_bind(replies_to_json(&r.replies))
                .push_bind(ms(event.received_at))
                .push_bind(event.source.as_str())
                .push_bind(event.is_final())
                .push_bind(
                    r.client_id
                        .and_then(|id| callers.get(&id))
                        .map(CallerName::as_str),
                );
        });
        query.push(" RETURNING dedup_key, cursor");
        let rows: Vec<(String, i64)> = query.build_query_as().fetch_all(&mut **tx).await?;
        cursors.extend(rows);
    }
    events
        .iter()
        .zip(keys)
        .map(|(event, key)| {
            // `remove`: a second copy of the same event in this group is a duplicate.
            cursors
                .remove(&key)
                .map(|cursor| {
                    Ok(StatusEvent {
                        cursor: cursor_from_db(cursor)?,
                        caller: event
                            .report
                            .client_id
                            .and_then(|id| callers.get(&id))
                            .cloned(),
                        event: event.clone(),
                    })
                })
                .transpose()
        })
        .collect()
}

/// The callers that claimed these client ids, where known: their events carry them.
async fn callers_of(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    ids: impl Iterator<Item = ClientId>,
) -> Result<HashMap<ClientId, CallerName>, StoreError> {
    let ids: BTreeSet<ClientId> = ids.collect();
    let ids: Vec<ClientId> = ids.into_iter().collect();
    let mut callers = HashMap::new();
    for chunk in row_chunks(&ids) {
        let mut query = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
            "SELECT client_id, caller FROM claims WHERE caller IS NOT NULL AND client_id IN (",
        );
        let mut list = query.separated(", ");
        for id in chunk {
            list.push_bind(id_to_db(id.get()));
        }
        query.push(")");
        let rows: Vec<(i64, String)> = query.build_query_as().fetch_all(&mut **tx).await?;
        callers.extend(callers_by_id(rows)?);
    }
    Ok(callers)
}
