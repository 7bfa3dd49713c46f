//! The stored shape of claims and events, shared by both stores: each store reads a
//! row into one of these structs, and one conversion turns it into the domain type,
//! so SQLite and PostgreSQL cannot read the same row differently.

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use serde::{Deserialize, Serialize};

use super::{
    AcceptedOutcome, ClaimRecord, ClaimState, Fingerprint, Lookups, PendingMessage, Settlement,
    StoreError,
};
use crate::core::domain::{
    CallerName, ClientId, Cursor, DeliveryReport, EventSource, LogEvent, Media, NewEvent, Phone,
    Reason, Reply, ReportedStatus, StatusEvent, SuppressionChange, SuppressionEvent,
    SuppressionSource,
};

/// Milliseconds since the epoch, as stored.
pub(super) fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

/// A stored timestamp.
pub(super) fn from_ms(v: i64) -> Result<DateTime<Utc>, StoreError> {
    Utc.timestamp_millis_opt(v)
        .single()
        .ok_or_else(|| StoreError::Corrupt(format!("timestamp {v}")))
}

/// Whole seconds, as stored (saturating).
pub(super) fn seconds(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

/// Milliseconds, as stored (saturating).
pub(super) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Client ids are u64 on the wire and 64-bit signed integers in both databases:
/// stored bit for bit.
pub(super) fn id_to_db(id: u64) -> i64 {
    id as i64
}

/// A stored client id.
pub(super) fn id_from_db(v: i64) -> u64 {
    v as u64
}

/// A report's client id as stored: 0 when unknown.
pub(super) fn report_id_to_db(id: Option<ClientId>) -> i64 {
    id.map_or(0, |id| id_to_db(id.get()))
}

/// A stored report's client id: 0 (or anything msgw cannot have sent) is unknown.
pub(super) fn report_id_from_db(v: i64) -> Option<ClientId> {
    ClientId::new(id_from_db(v)).ok()
}

/// A stored phone number (digits, as a 64-bit integer).
pub(super) fn phone_from_db(v: i64) -> Result<Phone, StoreError> {
    Phone::parse(&id_from_db(v).to_string())
        .map_err(|e| StoreError::Corrupt(format!("phone {v}: {e}")))
}

/// A phone number as stored.
pub(super) fn phone_to_db(phone: Phone) -> i64 {
    id_to_db(phone.get())
}

/// A stored cursor.
pub(super) fn cursor_from_db(v: i64) -> Result<Cursor, StoreError> {
    u64::try_from(v)
        .map(Cursor::new)
        .map_err(|_| StoreError::Corrupt(format!("cursor {v}")))
}

/// A cursor as stored.
pub(super) fn cursor_to_db(v: Cursor) -> i64 {
    i64::try_from(v.get()).unwrap_or(i64::MAX)
}

#[derive(Serialize, Deserialize)]
struct ReplyRow {
    datetime: Option<DateTime<Utc>>,
    message: Option<String>,
    media: Option<MediaRow>,
}

#[derive(Serialize, Deserialize)]
struct MediaRow {
    url: String,
    filename: String,
    filesize: u64,
}

/// The replies of a report, as stored (JSON text).
pub(super) fn replies_to_json(replies: &[Reply]) -> String {
    let rows: Vec<ReplyRow> = replies
        .iter()
        .map(|r| ReplyRow {
            datetime: r.datetime,
            message: r.message.clone(),
            media: r.media.as_ref().map(|m| MediaRow {
                url: m.url.clone(),
                filename: m.filename.clone(),
                filesize: m.filesize,
            }),
        })
        .collect();
    serde_json::to_string(&rows).unwrap_or_else(|_| "[]".into())
}

fn replies_from_json(text: &str) -> Result<Vec<Reply>, StoreError> {
    let rows: Vec<ReplyRow> =
        serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("replies: {e}")))?;
    Ok(rows
        .into_iter()
        .map(|r| Reply {
            datetime: r.datetime,
            time_unreadable: false,
            message: r.message,
            media: r.media.map(|m| Media {
                url: m.url,
                filename: m.filename,
                filesize: m.filesize,
            }),
        })
        .collect())
}

/// A row of `events`.
#[derive(Debug, sqlx::FromRow)]
pub(super) struct EventRow {
    cursor: i64,
    client_id: i64,
    msg_id: Option<String>,
    channel: Option<String>,
    status: Option<String>,
    success: bool,
    error: Option<String>,
    updated: Option<String>,
    reply: Option<String>,
    duration_s: Option<f64>,
    request_id: Option<String>,
    replies: String,
    received_at_ms: i64,
    source: String,
    caller: Option<String>,
    /// `status`, `opt_out` or `opt_in`.
    kind: String,
    /// A list change's number.
    phone: Option<i64>,
    /// A list change's keyword or reason.
    reason: Option<String>,
}

/// A stored event's `updated`; `None`, logged, when it does not read back.
fn updated_from_db(cursor: i64, updated: &str) -> Option<DateTime<Utc>> {
    let parsed = DateTime::parse_from_rfc3339(updated)
        .ok()
        .map(|t| t.with_timezone(&Utc))
        .filter(crate::core::domain::representable);
    if parsed.is_none() {
        tracing::warn!(
            cursor,
            updated,
            "stored event: unreadable `updated` left out"
        );
    }
    parsed
}

/// A stored event's replies; none, logged, when they do not read back.
fn replies_from_db(cursor: i64, replies: &str) -> Vec<Reply> {
    replies_from_json(replies).unwrap_or_else(|e| {
        tracing::warn!(cursor, error = %e, "stored event: unreadable `replies` left out");
        Vec::new()
    })
}

impl TryFrom<EventRow> for LogEvent {
    type Error = StoreError;

    fn try_from(row: EventRow) -> Result<Self, StoreError> {
        let suppressed = match row.kind.as_str() {
            "status" => return status_event(row).map(LogEvent::Status),
            "opt_out" => true,
            "opt_in" => false,
            other => return Err(StoreError::Corrupt(format!("event kind {other:?}"))),
        };
        let phone = row.phone.ok_or_else(|| {
            StoreError::Corrupt(format!("list change {} without a phone", row.cursor))
        })?;
        Ok(LogEvent::Suppression(SuppressionEvent {
            cursor: cursor_from_db(row.cursor)?,
            change: SuppressionChange {
                phone: phone_from_db(phone)?,
                suppressed,
                source: SuppressionSource::from_name(&row.source)
                    .ok_or_else(|| StoreError::Corrupt(format!("source {:?}", row.source)))?,
                reason: Reason::keyword(row.reason.as_deref().unwrap_or_default()),
                client_id: report_id_from_db(row.client_id),
                caller: caller_from_db(row.caller)?,
                at: from_ms(row.received_at_ms)?,
            },
        }))
    }
}

impl TryFrom<EventRow> for StatusEvent {
    type Error = StoreError;

    fn try_from(row: EventRow) -> Result<Self, StoreError> {
        match row.kind.as_str() {
            "status" => status_event(row),
            other => Err(StoreError::Corrupt(format!(
                "event {} is a {other}, not a status",
                row.cursor
            ))),
        }
    }
}

/// A stored status event.
fn status_event(row: EventRow) -> Result<StatusEvent, StoreError> {
    let cursor = row.cursor;
    Ok(StatusEvent {
        cursor: cursor_from_db(cursor)?,
        caller: caller_from_db(row.caller)?,
        event: NewEvent {
            report: DeliveryReport {
                client_id: report_id_from_db(row.client_id),
                msg_id: row.msg_id,
                channel_raw: row.channel,
                status: row.status.map(ReportedStatus::new),
                success: row.success,
                error: row.error,
                // An optional field that does not read back is left out, logged: one
                // bad row must never stop a replay for every subscriber.
                updated: row.updated.and_then(|u| updated_from_db(cursor, &u)),
                reply: row.reply,
                duration_secs: row.duration_s,
                request_id: row.request_id,
                replies: replies_from_db(cursor, &row.replies),
            },
            received_at: from_ms(row.received_at_ms)?,
            source: EventSource::from_name(&row.source)
                .ok_or_else(|| StoreError::Corrupt(format!("source {:?}", row.source)))?,
        },
    })
}

/// A row of `claims`.
#[derive(Debug, sqlx::FromRow)]
pub(super) struct ClaimRow {
    pub(super) client_id: i64,
    fingerprint: Vec<u8>,
    attempt: i64,
    state: String,
    claimed_at_ms: i64,
    msg_id: Option<String>,
    parts: Option<i64>,
    payload: Option<String>,
    recovered: bool,
    reason: Option<String>,
    caller: Option<String>,
    settle_until_ms: Option<i64>,
    lookups: i64,
    next_lookup_ms: Option<i64>,
    settled_at_ms: Option<i64>,
    send_at_ms: Option<i64>,
}

impl ClaimRow {
    /// The row of one id, with the columns [`ClaimRow::from_rusqlite`] reads.
    pub(super) const SELECT_BY_ID: &str =
        "SELECT client_id, fingerprint, attempt, state, claimed_at_ms,
                msg_id, parts, payload, recovered, reason, caller, settle_until_ms,
                lookups, next_lookup_ms, settled_at_ms, send_at_ms
           FROM claims WHERE client_id = ?1";

    /// A row of [`ClaimRow::SELECT_BY_ID`], read by the send path's SQLite writer.
    pub(super) fn from_rusqlite(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            client_id: row.get(0)?,
            fingerprint: row.get(1)?,
            attempt: row.get(2)?,
            state: row.get(3)?,
            claimed_at_ms: row.get(4)?,
            msg_id: row.get(5)?,
            parts: row.get(6)?,
            payload: row.get(7)?,
            recovered: row.get(8)?,
            reason: row.get(9)?,
            caller: row.get(10)?,
            settle_until_ms: row.get(11)?,
            lookups: row.get(12)?,
            next_lookup_ms: row.get(13)?,
            settled_at_ms: row.get(14)?,
            send_at_ms: row.get(15)?,
        })
    }
}

/// A stored caller name.
pub(super) fn caller_from_db(v: Option<String>) -> Result<Option<CallerName>, StoreError> {
    v.map(|name| caller_named(&name)).transpose()
}

fn caller_named(name: &str) -> Result<CallerName, StoreError> {
    CallerName::parse(name).map_err(|e| StoreError::Corrupt(format!("caller: {e}")))
}

/// The callers of client ids, from `(client_id, caller)` rows of `claims` (callers
/// not null): the callers each appended event is stamped with.
pub(super) fn callers_by_id(
    rows: Vec<(i64, String)>,
) -> Result<std::collections::HashMap<ClientId, CallerName>, StoreError> {
    rows.into_iter()
        .map(|(id, name)| {
            let id = ClientId::new(id_from_db(id))
                .map_err(|_| StoreError::Corrupt("claim with client id 0".into()))?;
            Ok((id, caller_named(&name)?))
        })
        .collect()
}

/// Reads claims with their ids.
pub(super) fn claims_with_ids(
    rows: Vec<ClaimRow>,
) -> Result<Vec<(ClientId, ClaimRecord)>, StoreError> {
    rows.into_iter()
        .map(|row| {
            let id = ClientId::new(id_from_db(row.client_id))
                .map_err(|_| StoreError::Corrupt("claim with client id 0".into()))?;
            Ok((id, ClaimRecord::try_from(row)?))
        })
        .collect()
}

/// A stored claim generation.
pub(super) fn attempt_from_db(v: i64) -> Result<u32, StoreError> {
    u32::try_from(v).map_err(|_| StoreError::Corrupt(format!("claim attempt {v}")))
}

impl TryFrom<ClaimRow> for ClaimRecord {
    type Error = StoreError;

    fn try_from(row: ClaimRow) -> Result<Self, StoreError> {
        let fingerprint = Fingerprint(
            row.fingerprint
                .try_into()
                .map_err(|_| StoreError::Corrupt("claim fingerprint is not 32 bytes".into()))?,
        );
        let state = match row.state.as_str() {
            "in_flight" => ClaimState::InFlight {
                since: from_ms(row.claimed_at_ms)?,
            },
            "accepted" => ClaimState::Accepted(AcceptedOutcome {
                msg_id: row.msg_id,
                parts: u32::try_from(row.parts.unwrap_or(0))
                    .map_err(|_| StoreError::Corrupt(format!("claim parts {:?}", row.parts)))?,
                payload: match row.payload {
                    Some(text) => serde_json::from_str(&text)
                        .map_err(|e| StoreError::Corrupt(format!("claim payload: {e}")))?,
                    None => serde_json::Value::Null,
                },
                recovered: row.recovered,
            }),
            "released" => ClaimState::Released {
                reason: row.reason.unwrap_or_default(),
            },
            "unknown" => ClaimState::Unknown {
                settle_until: row.settle_until_ms.map(from_ms).transpose()?,
                lookups: match row.next_lookup_ms {
                    Some(next) => Some(Lookups {
                        unresolved: u32::try_from(row.lookups).map_err(|_| {
                            StoreError::Corrupt(format!("claim lookups {}", row.lookups))
                        })?,
                        next_at: from_ms(next)?,
                    }),
                    None => None,
                },
            },
            "scheduled" => ClaimState::Scheduled {
                send_at: from_ms(send_at(row.send_at_ms)?)?,
            },
            "canceled" => ClaimState::Canceled {
                send_at: from_ms(send_at(row.send_at_ms)?)?,
                at: from_ms(row.settled_at_ms.unwrap_or(row.claimed_at_ms))?,
            },
            other => return Err(StoreError::Corrupt(format!("claim state {other:?}"))),
        };
        Ok(ClaimRecord {
            fingerprint,
            attempt: attempt_from_db(row.attempt)?,
            state,
            caller: caller_from_db(row.caller)?,
        })
    }
}

/// The time of a scheduled claim, which it always has.
fn send_at(v: Option<i64>) -> Result<i64, StoreError> {
    v.ok_or_else(|| StoreError::Corrupt("scheduled claim without send_at".into()))
}

/// The stored columns of a settlement.
pub(super) struct SettlementColumns<'a> {
    /// `state`.
    pub(super) state: &'static str,
    /// The accepted outcome (`msg_id`, `parts`, `payload`, `recovered`).
    pub(super) accepted: Option<&'a AcceptedOutcome>,
    /// `reason` of a release.
    pub(super) reason: Option<&'a str>,
    /// `settle_until_ms` of an unknown outcome.
    pub(super) settle_until_ms: Option<i64>,
}

/// How a settlement is stored.
pub(super) fn settlement_columns(settlement: &Settlement) -> SettlementColumns<'_> {
    let (state, accepted, reason, settle_until_ms) = match settlement {
        Settlement::Accepted(outcome, _) => ("accepted", Some(outcome), None, None),
        Settlement::Released(reason) => ("released", None, Some(reason.as_str()), None),
        Settlement::Unknown { settle_until } | Settlement::Unresolved { settle_until, .. } => {
            ("unknown", None, None, Some(ms(*settle_until)))
        }
    };
    SettlementColumns {
        state,
        accepted,
        reason,
        settle_until_ms,
    }
}

/// A row of `messages` due for a poll: client id, sent at, lifetime, polls.
pub(super) type DueRow = (i64, i64, i64, i64);

/// Reads a message due for a poll.
pub(super) fn pending_from_row(
    (id, sent, lifetime, polls): DueRow,
) -> Result<PendingMessage, StoreError> {
    Ok(PendingMessage {
        client_id: ClientId::new(id_from_db(id))
            .map_err(|_| StoreError::Corrupt("tracked message with client id 0".into()))?,
        sent_at: from_ms(sent)?,
        lifetime: Duration::from_secs(u64::try_from(lifetime).unwrap_or(0)),
        polls: u32::try_from(polls).unwrap_or(u32::MAX),
    })
}

/// Rows per multi-row statement at most (at most 14 bound values each, far below
/// SQLite's variable limit).
const INSERT_CHUNK: usize = 256;

/// Splits `items` for multi-row statements into chunks whose lengths are powers of two
/// (at most [`INSERT_CHUNK`]): every group size then reuses a handful of prepared
/// statements from the connection's cache instead of preparing a new text each time.
pub(super) fn row_chunks<T>(mut items: &[T]) -> impl Iterator<Item = &[T]> {
    std::iter::from_fn(move || {
        if items.is_empty() {
            return None;
        }
        let n = items.len().min(INSERT_CHUNK);
        let size = 1 << n.ilog2();
        let (chunk, rest) = items.split_at(size);
        items = rest;
        Some(chunk)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_chunks_are_powers_of_two_covering_every_item_in_order() {
        let items: Vec<u32> = (0..600).collect();
        for n in [0, 1, 2, 3, 50, 255, 256, 257, 600] {
            let chunks: Vec<&[u32]> = row_chunks(&items[..n]).collect();
            assert!(
                chunks
                    .iter()
                    .all(|c| c.len().is_power_of_two() && c.len() <= INSERT_CHUNK)
            );
            assert_eq!(chunks.concat(), items[..n].to_vec());
        }
        let sizes: Vec<usize> = row_chunks(&items[..50]).map(<[u32]>::len).collect();
        assert_eq!(sizes, [32, 16, 2]);
    }
}
