//! The fraud guard in SQL both databases speak, run inside the transaction that starts
//! (or resends, or approves) a verification: a range judged by its figures under its
//! lock, keys and calling codes counted against their windows, and the holds.

use chrono::{DateTime, Utc};

use super::conn::{Conn, Lock, Sql};
use crate::adapters::store::StoreError;
use crate::adapters::store::guard::{
    Figures, GuardCheck, GuardFinding, HoldRow, RangeHold, Window, key_lock,
};
use crate::adapters::store::rows::{from_ms, id_to_db, ms};
use crate::core::domain::ClientId;

/// The hold of a range, whatever its state (`$1` range).
const HOLD_SQL: &str = "SELECT * FROM guard_holds WHERE range_prefix = $1";

/// A range's approved and unconverted verifications, and the codes sent to its
/// unapproved ones whatever their age (`$1` range, `$2` counted after, `$3` an
/// unapproved one at or before this is unconverted).
const STATS_SQL: &str = "SELECT
       COALESCE(SUM(CASE WHEN approved THEN 1 ELSE 0 END), 0),
       COALESCE(SUM(CASE WHEN NOT approved AND started_at_ms <= $3 THEN 1 ELSE 0 END), 0),
       CAST(COALESCE(SUM(CASE WHEN approved THEN 0 ELSE sends END), 0) AS BIGINT)
     FROM guard_starts WHERE range_prefix = $1 AND started_at_ms > $2";

/// Ends a hold whose figures recovered (`$1` range, `$2` now).
const LIFT_SQL: &str = "UPDATE guard_holds SET until_ms = $2 WHERE range_prefix = $1";

/// Counts a resend of a verification (`$1` id).
const RESENT_SQL: &str = "UPDATE guard_starts SET sends = sends + 1 WHERE verification_id = $1";

/// Holds a range (`$1`..`$6`), keeping when it was last released.
const PUT_HOLD_SQL: &str = "INSERT INTO guard_holds
     (range_prefix, held_at_ms, until_ms, shadow, unconverted, approved)
     VALUES ($1, $2, $3, $4, $5, $6)
     ON CONFLICT (range_prefix) DO UPDATE SET held_at_ms = excluded.held_at_ms,
       until_ms = excluded.until_ms, shadow = excluded.shadow,
       unconverted = excluded.unconverted, approved = excluded.approved";

/// Starts of a calling code in its window (`$1` code, `$2` after): how many, the oldest.
const COUNTRY_COUNT_SQL: &str = "SELECT COUNT(*), MIN(started_at_ms) FROM guard_starts
     WHERE calling_code = $1 AND started_at_ms > $2";

/// Starts of a key in its window (`$1` mac, `$2` after): how many, the oldest.
const KEY_COUNT_SQL: &str = "SELECT COUNT(*), MIN(started_at_ms) FROM guard_keys
     WHERE key_mac = $1 AND started_at_ms > $2";

/// Counts a started verification (`$1` id, `$2` range, `$3` calling code, `$4` now).
const RECORD_START_SQL: &str = "INSERT INTO guard_starts
     (verification_id, range_prefix, calling_code, started_at_ms, approved)
     VALUES ($1, $2, $3, $4, FALSE) ON CONFLICT DO NOTHING";

/// Counts a key of a started verification (`$1` id, `$2` mac, `$3` now).
const RECORD_KEY_SQL: &str = "INSERT INTO guard_keys (verification_id, key_mac, started_at_ms)
     VALUES ($1, $2, $3) ON CONFLICT DO NOTHING";

/// Counts a verification approved (`$1` id).
const APPROVED_SQL: &str = "UPDATE guard_starts SET approved = TRUE WHERE verification_id = $1";

/// Forgets what was counted of a verification whose first send was refused (`$1`).
const FORGET_SQL: [&str; 2] = [
    "DELETE FROM guard_keys WHERE verification_id = $1",
    "DELETE FROM guard_starts WHERE verification_id = $1",
];

/// Ranges held at `$1`, in range order after `$2`, at most `$3`.
const HELD_SQL: &str = "SELECT * FROM guard_holds
     WHERE until_ms > $1 AND range_prefix > $2 ORDER BY range_prefix LIMIT $3";

/// Ends a range's hold now (`$1` range, `$2` now): it is judged afresh from then on.
const RELEASE_SQL: &str = "UPDATE guard_holds SET until_ms = $2, released_at_ms = $2
     WHERE range_prefix = $1 AND until_ms > $2 RETURNING *";

/// Counts since `since` against `window`: the oldest start when it is full.
async fn full(
    conn: &mut Conn<'_>,
    sql: Sql,
    window: Window,
    now: DateTime<Utc>,
) -> Result<Option<DateTime<Utc>>, StoreError> {
    let (count, oldest): (i64, Option<i64>) = conn.fetch_one(sql.bind(ms(window.since))).await?;
    if count < i64::from(window.max) {
        return Ok(None);
    }
    Ok(Some(oldest.map_or(Ok(now), from_ms)?))
}

/// Judges the range of `guard` by its figures now, under its lock, in the caller's
/// transaction (a start, a resend, an approval): its hold in force as a finding; else
/// a hold placed if the figures call for one. With `lift`, a hold whose figures no
/// longer call for it (its verifications were approved since) ends now instead, and
/// `Lifted` says so.
pub(in crate::adapters::store) async fn judge(
    conn: &mut Conn<'_>,
    guard: &GuardCheck,
    now: DateTime<Utc>,
    lift: bool,
) -> Result<Option<GuardFinding>, StoreError> {
    conn.lock(Lock::Range, &guard.range).await?;
    let row: Option<HoldRow> = conn
        .fetch_optional(Sql::new(HOLD_SQL).bind(&guard.range))
        .await?;
    let released_at = row
        .as_ref()
        .map(HoldRow::released_at)
        .transpose()?
        .flatten();
    let active = row
        .map(RangeHold::try_from)
        .transpose()?
        .filter(|hold| hold.until > now);
    // A hold placed in shadow mode is not enforced when the guard is on: the range is
    // judged again, and held for real if it still should be.
    let active = active.filter(|hold| !hold.shadow || !guard.enforce);
    if active.is_some() && !lift {
        return Ok(active.map(|hold| GuardFinding::Held { hold, new: false }));
    }
    // Starts in the millisecond of a release came after it.
    let since = released_at.map_or(guard.since, |r| {
        (r - chrono::Duration::milliseconds(1)).max(guard.since)
    });
    let sql = Sql::new(STATS_SQL)
        .bind(&guard.range)
        .bind(ms(since))
        .bind(ms(guard.decided_before));
    let (approved, unconverted, unapproved_sends): (i64, i64, i64) = conn.fetch_one(sql).await?;
    let count = |v: i64| u32::try_from(v).unwrap_or(u32::MAX);
    let figures = Figures {
        approved: count(approved),
        unconverted: count(unconverted),
        unapproved_sends: count(unapproved_sends),
    };
    let held = figures.hold(guard.min_starts, guard.min_conversion);
    if let Some(hold) = active {
        if held.is_some() {
            return Ok(Some(GuardFinding::Held { hold, new: false }));
        }
        conn.execute(Sql::new(LIFT_SQL).bind(&guard.range).bind(ms(now)))
            .await?;
        return Ok(Some(GuardFinding::Lifted { hold }));
    }
    let Some(unconverted) = held else {
        return Ok(None);
    };
    // As the store keeps it: to the millisecond.
    let hold = RangeHold {
        range: guard.range.clone(),
        held_at: from_ms(ms(now))?,
        until: from_ms(ms(guard.hold_until))?,
        shadow: !guard.enforce,
        unconverted,
        approved: figures.approved,
    };
    let sql = Sql::new(PUT_HOLD_SQL)
        .bind(&hold.range)
        .bind(ms(hold.held_at))
        .bind(ms(hold.until))
        .bind(hold.shadow)
        .bind(i64::from(hold.unconverted))
        .bind(i64::from(hold.approved));
    conn.execute(sql).await?;
    Ok(Some(GuardFinding::Held { hold, new: true }))
}

/// Checks a start against the guard, holding its range if its figures say so (the
/// hold is written in the caller's transaction). With `enforce`, stops at the first
/// finding: the start is refused anyway.
pub(in crate::adapters::store) async fn check(
    conn: &mut Conn<'_>,
    guard: &GuardCheck,
    now: DateTime<Utc>,
) -> Result<Vec<GuardFinding>, StoreError> {
    let mut findings: Vec<GuardFinding> =
        judge(conn, guard, now, false).await?.into_iter().collect();
    if guard.enforce && !findings.is_empty() {
        return Ok(findings);
    }
    let mut keys: Vec<_> = guard.keys.iter().collect();
    keys.sort_by_key(|k| key_lock(&k.mac));
    for key in keys {
        conn.lock(Lock::Key, key_lock(&key.mac)).await?;
        let count = Sql::new(KEY_COUNT_SQL).bind(key.mac.as_slice());
        if let Some(oldest) = full(conn, count, key.window, now).await? {
            findings.push(GuardFinding::KeyLimited {
                name: key.name.clone(),
                window: key.window,
                oldest,
            });
            if guard.enforce {
                return Ok(findings);
            }
        }
    }
    if let Some(window) = guard.country {
        conn.lock(Lock::Country, &guard.calling_code).await?;
        let count = Sql::new(COUNTRY_COUNT_SQL).bind(&guard.calling_code);
        if let Some(oldest) = full(conn, count, window, now).await? {
            findings.push(GuardFinding::CountryLimited {
                code: guard.calling_code.clone(),
                window,
                oldest,
            });
        }
    }
    Ok(findings)
}

/// Counts a started verification and its keys.
pub(in crate::adapters::store) async fn record(
    conn: &mut Conn<'_>,
    id: ClientId,
    guard: &GuardCheck,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let id = id_to_db(id.get());
    let sql = Sql::new(RECORD_START_SQL)
        .bind(id)
        .bind(&guard.range)
        .bind(&guard.calling_code)
        .bind(ms(now));
    conn.execute(sql).await?;
    for key in &guard.keys {
        let sql = Sql::new(RECORD_KEY_SQL)
            .bind(id)
            .bind(key.mac.as_slice())
            .bind(ms(now));
        conn.execute(sql).await?;
    }
    Ok(())
}

/// Counts a resend of a verification.
pub(in crate::adapters::store) async fn resent(
    conn: &mut Conn<'_>,
    id: ClientId,
) -> Result<(), StoreError> {
    conn.execute(Sql::new(RESENT_SQL).bind(id_to_db(id.get())))
        .await?;
    Ok(())
}

/// Counts a verification approved.
pub(in crate::adapters::store) async fn approved(
    conn: &mut Conn<'_>,
    id: ClientId,
) -> Result<(), StoreError> {
    conn.execute(Sql::new(APPROVED_SQL).bind(id_to_db(id.get())))
        .await?;
    Ok(())
}

/// Forgets what was counted of a verification.
pub(in crate::adapters::store) async fn forget(
    conn: &mut Conn<'_>,
    id: ClientId,
) -> Result<(), StoreError> {
    for sql in FORGET_SQL {
        conn.execute(Sql::new(sql).bind(id_to_db(id.get()))).await?;
    }
    Ok(())
}

/// The hold of a range in force at `now`.
pub(in crate::adapters::store) async fn hold_of(
    conn: &mut Conn<'_>,
    range: &str,
    now: DateTime<Utc>,
) -> Result<Option<RangeHold>, StoreError> {
    let row: Option<HoldRow> = conn.fetch_optional(Sql::new(HOLD_SQL).bind(range)).await?;
    Ok(row
        .map(RangeHold::try_from)
        .transpose()?
        .filter(|h| h.until > now))
}

/// Ranges held at `now`, in range order after `after`, at most `limit`.
pub(in crate::adapters::store) async fn held(
    conn: &mut Conn<'_>,
    now: DateTime<Utc>,
    after: &str,
    limit: u32,
) -> Result<Vec<RangeHold>, StoreError> {
    let sql = Sql::new(HELD_SQL)
        .bind(ms(now))
        .bind(after)
        .bind(i64::from(limit));
    let rows: Vec<HoldRow> = conn.fetch_all(sql).await?;
    rows.into_iter().map(RangeHold::try_from).collect()
}

/// Ends a range's hold at `now`; `None` when it was not held.
pub(in crate::adapters::store) async fn release(
    conn: &mut Conn<'_>,
    range: &str,
    now: DateTime<Utc>,
) -> Result<Option<RangeHold>, StoreError> {
    let sql = Sql::new(RELEASE_SQL).bind(range).bind(ms(now));
    let row: Option<HoldRow> = conn.fetch_optional(sql).await?;
    row.map(RangeHold::try_from).transpose()
}
