//! SQLite's event appends: duplicates found first, then one multi-row insert whose
//! cursors SQLite hands out (the file's one writer appends in commit order); the
//! suppression list's changes after the group's statuses, in the same transaction.

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::adapters::store::common::conn::Conn;
use crate::adapters::store::common::suppressions::{self, Made};
use crate::adapters::store::rows::{
    callers_by_id, cursor_from_db, id_to_db, ms, phone_to_db, replies_to_json, report_id_to_db,
    row_chunks,
};
use crate::adapters::store::{Appended, LogAppend, StoreError};
use crate::core::domain::{CallerName, ClientId, NewEvent, StatusEvent, SuppressionEvent};

/// Appends `appends` in `tx`: the reports' events in chunks (each unless stored
/// already), then the list changes, each with its event.
pub(super) async fn append(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    appends: &[LogAppend],
) -> Result<Vec<Appended>, StoreError> {
    let reports: Vec<&NewEvent> = appends
        .iter()
        .filter_map(|a| match a {
            LogAppend::Report { event, .. } => Some(event),
            LogAppend::Change(_) => None,
        })
        .collect();
    let mut stored = Vec::with_capacity(reports.len());
    for chunk in row_chunks(&reports) {
        stored.extend(insert_events(tx, chunk).await?);
    }
    let applied = suppressions::apply(&mut Conn::Sqlite(tx), appends).await?;
    let made: Vec<&Made> = applied.iter().flat_map(|a| &a.made).collect();
    let mut cursors = HashMap::new();
    for chunk in row_chunks(&made) {
        cursors.extend(insert_changes(tx, chunk).await?);
    }
    let mut stored = stored.into_iter();
    appends
        .iter()
        .zip(applied)
        .map(|(append, applied)| {
            let status = match append {
                LogAppend::Report { .. } => stored.next().flatten(),
                LogAppend::Change(_) => None,
            };
            let suppressions = applied
                .made
                .into_iter()
                .map(|m| {
                    let cursor = cursors.get(&m.key).copied().ok_or_else(|| {
                        StoreError::Append(format!("no cursor for the list change {}", m.key))
                    })?;
                    Ok(SuppressionEvent {
                        cursor: cursor_from_db(cursor)?,
                        change: m.change,
                    })
                })
                .collect::<Result<_, StoreError>>()?;
            Ok(Appended {
                status,
                suppressions,
                entry: applied.entry,
                superseded: applied.superseded,
            })
        })
        .collect()
}

/// Inserts the events of list changes with one multi-row statement: their cursors by key.
async fn insert_changes(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    made: &[&Made],
) -> Result<Vec<(String, i64)>, StoreError> {
    let mut query = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
        "INSERT INTO events (dedup_key, client_id, success, replies, received_at_ms, source,
                             is_final, caller, kind, phone, reason) ",
    );
    query.push_values(made, |mut row, m| {
        let c = &m.change;
        row.push_bind(m.key.as_str())
            .push_bind(report_id_to_db(c.client_id))
            .push_bind(false)
            .push_bind("[]")
            .push_bind(ms(c.at))
            .push_bind(c.source.as_str())
            .push_bind(false)
            .push_bind(c.caller.as_ref().map(CallerName::as_str))
            .push_bind(c.direction())
            .push_bind(phone_to_db(c.phone))
            .push_bind(c.reason.as_str());
    });
    query.push(" RETURNING dedup_key, cursor");
    Ok(query.build_query_as().fetch_all(&mut **tx).await?)
}

/// Inserts events with one multi-row statement; duplicates (already stored, or twice in
/// `events`) come back as `None`. Duplicates are found first and never inserted: an
/// `INSERT` that conflicts would still use up a cursor, and a gap in the cursors costs
/// every live subscriber a replay from the store.
async fn insert_events(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    events: &[&NewEvent],
) -> Result<Vec<Option<StatusEvent>>, StoreError> {
    let keys: Vec<String> = events.iter().map(|e| e.dedup_key()).collect();
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
        .map(|(event, key)| (*event, key.as_str()))
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
                        event: (*event).clone(),
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
