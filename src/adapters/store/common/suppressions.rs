//! The suppression list in SQL both databases speak: reading entries, and applying the
//! list changes of an append to the event log inside its transaction (the events
//! themselves are inserted by each database's append, which hands out the cursors).

use std::collections::HashSet;

use chrono::{DateTime, SubsecRound, Utc};

use super::conn::{Conn, Sql};
use crate::adapters::store::rows::{
    caller_from_db, from_ms, id_to_db, ms, phone_from_db, phone_to_db, report_id_from_db,
    report_id_to_db,
};
use crate::adapters::store::{LogAppend, StoreError};
use crate::core::domain::{
    ClientId, Phone, Reason, Suppression, SuppressionChange, SuppressionSource,
};

/// A row of `suppressions`.
#[derive(Debug, sqlx::FromRow)]
struct SuppressionRow {
    phone: i64,
    source: String,
    reason: String,
    client_id: i64,
    caller: Option<String>,
    created_at_ms: i64,
}

impl TryFrom<SuppressionRow> for Suppression {
    type Error = StoreError;

    fn try_from(row: SuppressionRow) -> Result<Self, StoreError> {
        Ok(Self {
            phone: phone_from_db(row.phone)?,
            source: SuppressionSource::from_name(&row.source).ok_or_else(|| {
                StoreError::Corrupt(format!("suppression source {:?}", row.source))
            })?,
            reason: Reason::keyword(&row.reason),
            client_id: report_id_from_db(row.client_id),
            caller: caller_from_db(row.caller)?,
            created_at: from_ms(row.created_at_ms)?,
        })
    }
}

/// The entry of `phone`, if it is on the list.
pub(in crate::adapters::store) async fn get(
    conn: &mut Conn<'_>,
    phone: Phone,
) -> Result<Option<Suppression>, StoreError> {
    let sql = Sql::new(
        "SELECT phone, source, reason, client_id, caller, created_at_ms FROM suppressions
          WHERE phone = $1",
    )
    .bind(phone_to_db(phone));
    let row: Option<SuppressionRow> = conn.fetch_optional(sql).await?;
    row.map(Suppression::try_from).transpose()
}

/// Up to `limit` entries after `after` (from the first when `None`), in number order.
pub(in crate::adapters::store) async fn list(
    conn: &mut Conn<'_>,
    after: Option<Phone>,
    limit: u32,
) -> Result<Vec<Suppression>, StoreError> {
    let sql = Sql::new(
        "SELECT phone, source, reason, client_id, caller, created_at_ms FROM suppressions
          WHERE phone > $1 ORDER BY phone LIMIT $2",
    )
    .bind(after.map_or(0, phone_to_db))
    .bind(i64::from(limit));
    let rows: Vec<SuppressionRow> = conn.fetch_all(sql).await?;
    rows.into_iter().map(Suppression::try_from).collect()
}

async fn insert(conn: &mut Conn<'_>, entry: &Suppression) -> Result<(), StoreError> {
    let sql = Sql::new(
        "INSERT INTO suppressions (phone, source, reason, client_id, caller, created_at_ms)
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(phone_to_db(entry.phone))
    .bind(entry.source.as_str())
    .bind(entry.reason.as_str())
    .bind(report_id_to_db(entry.client_id))
    .bind(entry.caller.as_ref().map(|c| c.as_str()))
    .bind(ms(entry.created_at));
    conn.execute(sql).await.map(drop)
}

async fn delete(conn: &mut Conn<'_>, phone: Phone) -> Result<(), StoreError> {
    let sql = Sql::new("DELETE FROM suppressions WHERE phone = $1").bind(phone_to_db(phone));
    conn.execute(sql).await.map(drop)
}

/// The number message `id` went to, if msgw recorded it.
async fn phone_of(conn: &mut Conn<'_>, id: ClientId) -> Result<Option<Phone>, StoreError> {
    let sql = Sql::new("SELECT phone FROM messages WHERE client_id = $1").bind(id_to_db(id.get()));
    let row: Option<(Option<i64>,)> = conn.fetch_optional(sql).await?;
    row.and_then(|(phone,)| phone)
        .map(phone_from_db)
        .transpose()
}

/// Whether the reply with `key` was seen: remembered, or (applied before replies were
/// remembered) an event of the log.
async fn stored(conn: &mut Conn<'_>, key: &str) -> Result<bool, StoreError> {
    let sql = Sql::new("SELECT seen_at_ms FROM seen_replies WHERE dedup_key = $1").bind(key);
    let row: Option<(i64,)> = conn.fetch_optional(sql).await?;
    if row.is_some() {
        return Ok(true);
    }
    let sql = Sql::new("SELECT cursor FROM events WHERE dedup_key = $1").bind(key);
    let row: Option<(i64,)> = conn.fetch_optional(sql).await?;
    Ok(row.is_some())
}

/// Remembers the reply with `key`, seen `at`, whatever it changed.
async fn remember(conn: &mut Conn<'_>, key: &str, at: DateTime<Utc>) -> Result<(), StoreError> {
    let sql = Sql::new(
        "INSERT INTO seen_replies (dedup_key, seen_at_ms) VALUES ($1, $2)
         ON CONFLICT (dedup_key) DO NOTHING",
    )
    .bind(key)
    .bind(ms(at));
    conn.execute(sql).await.map(drop)
}

/// A list change made, to store as an event under `key`.
#[derive(Debug)]
pub(in crate::adapters::store) struct Made {
    /// The event's dedup key.
    pub(in crate::adapters::store) key: String,
    /// The change.
    pub(in crate::adapters::store) change: SuppressionChange,
}

/// What the list changes of one append did.
#[derive(Debug, Default)]
pub(in crate::adapters::store) struct Applied {
    /// The changes made, in order.
    pub(in crate::adapters::store) made: Vec<Made>,
    /// A caller's change: the entry (see [`crate::adapters::store::Appended::entry`]).
    pub(in crate::adapters::store) entry: Option<Suppression>,
    /// A caller's change not made: the time of the newer, opposite decision that stands.
    pub(in crate::adapters::store) superseded: Option<DateTime<Utc>>,
}

/// Applies the list changes of `appends`, in order, in the transaction `conn` runs:
/// keyword replies not seen before (by their keys, remembered whatever they changed, or
/// earlier in the group) to the number their message went to, each at its own time, and callers'
/// changes at theirs. A change older than the number's newest decision is not made.
/// Changes that change nothing (an opt-out of a suppressed number, an opt-in of one
/// that is not) make no event. One answer per append.
pub(in crate::adapters::store) async fn apply(
    conn: &mut Conn<'_>,
    appends: &[LogAppend],
) -> Result<Vec<Applied>, StoreError> {
    let mut seen: HashSet<String> = HashSet::new();
    let mut answers = Vec::with_capacity(appends.len());
    for append in appends {
        let mut applied = Applied::default();
        match append {
            LogAppend::Report { keywords, .. } if keywords.is_empty() => {}
            LogAppend::Report { event, keywords } => {
                let report = &event.report;
                let mut fresh = Vec::new();
                for keyword in keywords {
                    let key = keyword.dedup_key(report);
                    if seen.contains(&key) || stored(conn, &key).await? {
                        continue;
                    }
                    // Applied once, whatever it changes: a repeat of it later must not
                    // apply it again at its new arrival time.
                    remember(conn, &key, event.received_at).await?;
                    seen.insert(key.clone());
                    fresh.push((key, keyword));
                }
                if fresh.is_empty() {
                    answers.push(applied);
                    continue;
                }
                let phone = match report.client_id {
                    Some(id) => phone_of(conn, id).await?,
                    None => None,
                };
                let Some(phone) = phone else {
                    tracing::info!(
                        client_id = report.client_id.map(ClientId::get),
                        msg_id = report.msg_id.as_deref(),
                        keywords = fresh.len(),
                        "opt-out keyword in a reply to a message msgw has no number of: the list is unchanged"
                    );
                    answers.push(applied);
                    continue;
                };
                for (key, keyword) in fresh {
                    // A time given and not read: the reply's time is unknown. A STOP still
                    // opts out (as of its arrival, which no known decision is after); a
                    // START never lifts a decision whose time is known.
                    let at = match keyword.decided_at(report, event.received_at) {
                        Some(at) => at,
                        None if keyword.opt_out => event.received_at,
                        None => {
                            tracing::warn!(
                                client_id = report.client_id.map(ClientId::get),
                                msg_id = report.msg_id.as_deref(),
                                "an opt-in reply whose time cannot be read: the list is unchanged"
                            );
                            continue;
                        }
                    };
                    let change = SuppressionChange {
                        phone,
                        suppressed: keyword.opt_out,
                        source: SuppressionSource::Reply,
                        reason: keyword.keyword.clone(),
                        client_id: report.client_id,
                        caller: None,
                        // As stored: the event published now reads back the same.
                        at: at.trunc_subsecs(3),
                    };
                    if make(conn, &change).await?.changed {
                        applied.made.push(Made { key, change });
                    }
                }
            }
            LogAppend::Change(change) => {
                let made = make(conn, change).await?;
                applied.entry = made.entry;
                applied.superseded = made.superseded;
                if made.changed {
                    let key = format!(
                        "api|{}|{}|{:016x}",
                        change.phone.get(),
                        ms(change.at),
                        rand::random::<u64>()
                    );
                    applied.made.push(Made {
                        key,
                        change: change.clone(),
                    });
                }
            }
        }
        answers.push(applied);
    }
    Ok(answers)
}

/// What [`make`] did.
struct Outcome {
    /// The number's entry: after an opt-out, the entry in force; after an opt-in, the
    /// entry removed (`None` when there was none); unchanged when superseded.
    entry: Option<Suppression>,
    /// The list changed.
    changed: bool,
    /// Not made: a newer decision the other way stands, taken at this time.
    superseded: Option<DateTime<Utc>>,
}

/// Records `change` as its number's newest decision, unless the stored one is newer (or
/// as new and an opt-out, which wins a tie); whether it was recorded. The comparison is
/// the write's own `WHERE`, so it holds whatever else reads the row, on any replica.
async fn decide(conn: &mut Conn<'_>, change: &SuppressionChange) -> Result<bool, StoreError> {
    let sql = Sql::new(
        "INSERT INTO consent (phone, opted_out, decided_at_ms) VALUES ($1, $2, $3)
         ON CONFLICT (phone) DO UPDATE
            SET opted_out = excluded.opted_out, decided_at_ms = excluded.decided_at_ms
          WHERE consent.decided_at_ms < excluded.decided_at_ms
             OR (consent.decided_at_ms = excluded.decided_at_ms
                 AND excluded.opted_out AND NOT consent.opted_out)",
    )
    .bind(phone_to_db(change.phone))
    .bind(change.suppressed)
    .bind(ms(change.at));
    Ok(conn.execute(sql).await? == 1)
}

/// The newest decision of `phone`: opted out, and when.
async fn decision(
    conn: &mut Conn<'_>,
    phone: Phone,
) -> Result<Option<(bool, DateTime<Utc>)>, StoreError> {
    let sql = Sql::new("SELECT opted_out, decided_at_ms FROM consent WHERE phone = $1")
        .bind(phone_to_db(phone));
    let row: Option<(bool, i64)> = conn.fetch_optional(sql).await?;
    row.map(|(out, at)| Ok((out, from_ms(at)?))).transpose()
}

/// Makes `change` on the list if it is the number's newest decision.
async fn make(conn: &mut Conn<'_>, change: &SuppressionChange) -> Result<Outcome, StoreError> {
    let existing = get(conn, change.phone).await?;
    if !decide(conn, change).await? {
        // An older reply (or one as old that lifts an opt-out): the newer decision stands.
        let superseded = decision(conn, change.phone)
            .await?
            .filter(|(out, _)| *out != change.suppressed)
            .map(|(_, at)| at);
        return Ok(Outcome {
            entry: existing,
            changed: false,
            superseded,
        });
    }
    let (entry, changed) = match (change.suppressed, existing) {
        (true, Some(entry)) => (Some(entry), false),
        (true, None) => {
            let entry = change.entry();
            insert(conn, &entry).await?;
            (Some(entry), true)
        }
        (false, Some(entry)) => {
            delete(conn, change.phone).await?;
            (Some(entry), true)
        }
        (false, None) => (None, false),
    };
    Ok(Outcome {
        entry,
        changed,
        superseded: None,
    })
}
