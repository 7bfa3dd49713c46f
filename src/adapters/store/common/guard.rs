//! The fraud guard in SQL both databases speak, run inside the transaction that sends
//! a code (a start's or a resend's) or approves a verification: a range and its calling
//! code judged by their figures under their locks, keys and calling codes counted
//! against their windows, the keys that approved a code, and the holds. Every code
//! counts, whichever call sent it.

use chrono::{DateTime, Utc};

use super::conn::{Conn, Lock, Sql};
use crate::adapters::store::guard::{HoldRow, check_locks, key_lock};
use crate::adapters::store::rows::{from_ms, id_to_db, ms};
use crate::core::domain::ClientId;
use crate::core::ports::store::{
    Figures, GuardCheck, GuardFinding, KeyCheck, RangeHold, Scope, ScopeKind, StoreError, Window,
};

/// The hold of a range, whatever its state (`$1` range).
const HOLD_SQL: &str = "SELECT * FROM guard_holds WHERE range_prefix = $1";

/// The figures of a prefix by `$column` (`range_prefix`, `region` or `calling_code`): its
/// approved verifications (whose first code is in the window), its unconverted codes, and its codes to unapproved
/// verifications whatever their age (`$1` prefix, `$2` counted after, `$3` an unapproved
/// code sent at or before this is unconverted). Codes to safe prefixes are not judged.
macro_rules! stats_sql {
    ($column:literal) => {
        concat!(
            "SELECT CAST(COALESCE(SUM(CASE WHEN approved AND send_id = verification_id THEN 1 ELSE 0 END), 0) AS BIGINT),
               CAST(COALESCE(SUM(CASE WHEN NOT approved AND sent_at_ms <= $3 THEN 1 ELSE 0 END), 0) AS BIGINT),
               CAST(COALESCE(SUM(CASE WHEN approved THEN 0 ELSE 1 END), 0) AS BIGINT)
             FROM guard_codes WHERE ",
            $column,
            " = $1 AND sent_at_ms > $2 AND NOT exempt"
        )
    };
}

/// A range's figures (see [`stats_sql`]).
const RANGE_STATS_SQL: &str = stats_sql!("range_prefix");

/// A calling code's figures (see [`stats_sql`]).
const CODE_STATS_SQL: &str = stats_sql!("calling_code");

/// A region's figures (`$1` `code/REGION`, see [`stats_sql`]).
const REGION_STATS_SQL: &str = stats_sql!("region");

/// Ends a hold whose figures recovered (`$1` range, `$2` now).
const LIFT_SQL: &str = "UPDATE guard_holds SET until_ms = $2 WHERE range_prefix = $1";

/// Holds a range (`$1`..`$6`), keeping when it was last released.
const PUT_HOLD_SQL: &str = "INSERT INTO guard_holds
     (range_prefix, held_at_ms, until_ms, shadow, unconverted, approved)
     VALUES ($1, $2, $3, $4, $5, $6)
     ON CONFLICT (range_prefix) DO UPDATE SET held_at_ms = excluded.held_at_ms,
       until_ms = excluded.until_ms, shadow = excluded.shadow,
       unconverted = excluded.unconverted, approved = excluded.approved";

/// Codes to a calling code in its window (`$1` code, `$2` after): how many, the oldest.
const COUNTRY_COUNT_SQL: &str = "SELECT COUNT(*), MIN(sent_at_ms) FROM guard_codes
     WHERE calling_code = $1 AND sent_at_ms > $2";

/// Codes of a key in its window (`$1` mac, `$2` after): how many, the oldest.
const KEY_COUNT_SQL: &str = "SELECT COUNT(*), MIN(sent_at_ms) FROM guard_code_keys
     WHERE key_mac = $1 AND sent_at_ms > $2";

/// Whether a key approved a code after `$2` in calling code `$3` (`$1` mac).
const TRUSTED_SQL: &str = "SELECT COUNT(*) FROM guard_trusted_keys
     WHERE key_mac = $1 AND approved_at_ms > $2 AND calling_code = $3";

/// The keys a verification started with (`$1` its id, the first send's).
const FIRST_KEYS_SQL: &str = "SELECT key_name, key_mac FROM guard_code_keys WHERE send_id = $1";

/// Counts a code sent (`$1` send, `$2` verification, `$3` range, `$4` calling code,
/// `$5` now, `$6` exempt from the conversion rule, `$7` region of a shared code or NULL).
const RECORD_CODE_SQL: &str = "INSERT INTO guard_codes
     (send_id, verification_id, range_prefix, calling_code, sent_at_ms, approved, exempt, region)
     VALUES ($1, $2, $3, $4, $5, FALSE, $6, $7) ON CONFLICT DO NOTHING";

/// Counts a key of a code (`$1` send, `$2` verification, `$3` name, `$4` mac, `$5` now).
const RECORD_KEY_SQL: &str = "INSERT INTO guard_code_keys
     (send_id, verification_id, key_name, key_mac, sent_at_ms)
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING";

/// Counts a verification's codes approved (`$1` id).
const APPROVED_SQL: &str = "UPDATE guard_codes SET approved = TRUE WHERE verification_id = $1";

/// Trusts the keys an approved verification started with (its first send's: not keys
/// its resends added) from now, in the calling code of its number (`$1` id, `$2` now).
const TRUST_SQL: &str = "INSERT INTO guard_trusted_keys (key_mac, calling_code, approved_at_ms)
     SELECT DISTINCT k.key_mac, c.calling_code, $2
       FROM guard_code_keys k JOIN guard_codes c ON c.send_id = k.send_id
      WHERE k.send_id = $1 AND k.verification_id = $1
     ON CONFLICT (key_mac, calling_code) DO UPDATE SET approved_at_ms = excluded.approved_at_ms";

/// Forgets what was counted of a verification whose first send was refused (`$1`).
const FORGET_SQL: [&str; 2] = [
    "DELETE FROM guard_code_keys WHERE verification_id = $1",
    "DELETE FROM guard_codes WHERE verification_id = $1",
];

/// Uncounts a send that sent nothing (`$1`).
const UNSENT_SQL: [&str; 2] = [
    "DELETE FROM guard_code_keys WHERE send_id = $1",
    "DELETE FROM guard_codes WHERE send_id = $1",
];

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

/// A prefix judged: what was found against it, or its figures when it is open (to
/// hold it at once if the code now sent reaches its cap).
pub(in crate::adapters::store) struct Judged {
    /// Its hold (in force, placed, or lifted).
    pub finding: Option<GuardFinding>,
    /// Its figures, when it is not held.
    pub figures: Option<Figures>,
}

/// Judges `scope` of `guard` by its figures now, under its lock, in the caller's
/// transaction (a start, a resend, an approval): its hold in force as a finding; else a
/// hold placed if the figures call for one. With `lift`, a hold whose figures no longer
/// call for it (its verifications were approved since) ends now instead, and `Lifted`
/// says so.
pub(in crate::adapters::store) async fn judge(
    conn: &mut Conn<'_>,
    guard: &GuardCheck,
    scope: Scope<'_>,
    now: DateTime<Utc>,
    lift: bool,
) -> Result<Judged, StoreError> {
    conn.lock(Lock::Range, scope.prefix).await?;
    judged(conn, guard, scope, now, lift).await
}

/// [`judge`], its lock taken.
async fn judged(
    conn: &mut Conn<'_>,
    guard: &GuardCheck,
    scope: Scope<'_>,
    now: DateTime<Utc>,
    lift: bool,
) -> Result<Judged, StoreError> {
    let found = |finding: GuardFinding| Judged {
        finding: Some(finding),
        figures: None,
    };
    let row: Option<HoldRow> = conn
        .fetch_optional(Sql::new(HOLD_SQL).bind(scope.prefix))
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
    if let Some(hold) = active.clone().filter(|_| !lift) {
        return Ok(found(GuardFinding::Held { hold, new: false }));
    }
    // Codes in the millisecond of a release came after it.
    let since = released_at.map_or(guard.since, |r| {
        (r - chrono::Duration::milliseconds(1)).max(guard.since)
    });
    let stats = match scope.kind {
        ScopeKind::Range => RANGE_STATS_SQL,
        ScopeKind::Region => REGION_STATS_SQL,
        ScopeKind::CallingCode => CODE_STATS_SQL,
    };
    let sql = Sql::new(stats)
        .bind(scope.prefix)
        .bind(ms(since))
        .bind(ms(guard.decided_before));
    let (approved, unconverted, unapproved_sends): (i64, i64, i64) = conn.fetch_one(sql).await?;
    let count = |v: i64| u32::try_from(v).unwrap_or(u32::MAX);
    let figures = Figures {
        approved: count(approved),
        unconverted: count(unconverted),
        unapproved_sends: count(unapproved_sends),
    };
    let held = figures.hold(scope.min_starts, guard.min_conversion);
    if let Some(hold) = active {
        if held.is_some() {
            return Ok(found(GuardFinding::Held { hold, new: false }));
        }
        conn.execute(Sql::new(LIFT_SQL).bind(scope.prefix).bind(ms(now)))
            .await?;
        return Ok(found(GuardFinding::Lifted { hold }));
    }
    let Some(unconverted) = held else {
        return Ok(Judged {
            finding: None,
            figures: Some(figures),
        });
    };
    let hold = put_hold(conn, guard, scope, now, unconverted, figures.approved).await?;
    Ok(found(GuardFinding::Held { hold, new: true }))
}

/// Holds `scope` from `now` with these figures.
async fn put_hold(
    conn: &mut Conn<'_>,
    guard: &GuardCheck,
    scope: Scope<'_>,
    now: DateTime<Utc>,
    unconverted: u32,
    approved: u32,
) -> Result<RangeHold, StoreError> {
    // As the store keeps it: to the millisecond.
    let hold = RangeHold {
        range: scope.prefix.to_owned(),
        held_at: from_ms(ms(now))?,
        until: from_ms(ms(guard.hold_until))?,
        shadow: !guard.enforce,
        unconverted,
        approved,
    };
    let sql = Sql::new(PUT_HOLD_SQL)
        .bind(&hold.range)
        .bind(ms(hold.held_at))
        .bind(ms(hold.until))
        .bind(hold.shadow)
        .bind(i64::from(hold.unconverted))
        .bind(i64::from(hold.approved));
    conn.execute(sql).await?;
    Ok(hold)
}

/// A prefix found open by a check, with its figures before the code.
pub(in crate::adapters::store) struct Open {
    prefix: String,
    kind: ScopeKind,
    min_starts: u32,
    figures: Figures,
}

/// What a check found against a code, and the prefixes it found open (so [`capped`]
/// holds one whose cap the code reaches).
#[derive(Default)]
pub(in crate::adapters::store) struct Checked {
    /// What it found.
    pub findings: Vec<GuardFinding>,
    /// The open prefixes.
    pub open: Vec<Open>,
}

/// Whether one of the call's keys started a verification approved after `since` in
/// the calling code of the call's number (a returning user comes back to its country).
async fn trusted(
    conn: &mut Conn<'_>,
    guard: &GuardCheck,
    since: Option<DateTime<Utc>>,
) -> Result<bool, StoreError> {
    let Some(since) = since else {
        return Ok(false);
    };
    for key in &guard.keys {
        let sql = Sql::new(TRUSTED_SQL)
            .bind(key.mac.as_slice())
            .bind(ms(since))
            .bind(&guard.calling_code);
        let (n,): (i64,) = conn.fetch_one(sql).await?;
        if n > 0 {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Checks a code about to be sent against the guard (a start's or a resend's), holding
/// its range if its figures say so (the hold is written in the caller's transaction): a
/// held range refuses it unless one of its keys is trusted; its keys and its calling
/// code are counted against their limits. With `enforce`, stops at the first finding
/// that refuses: the code is refused anyway.
pub(in crate::adapters::store) async fn check(
    conn: &mut Conn<'_>,
    guard: &GuardCheck,
    now: DateTime<Utc>,
) -> Result<Checked, StoreError> {
    let mut checked = Checked::default();
    let mut trust: Option<bool> = None;
    let scopes = guard.scopes();
    let mut keys: Vec<_> = guard.keys.iter().collect();
    keys.sort_by_key(|k| key_lock(&k.mac));
    // Every lock the check may need, in their order, at once: a check that stops early
    // holds a few more than it used, until its transaction ends.
    conn.lock_all(&check_locks(guard, &scopes, &keys)).await?;
    for scope in scopes {
        let judged = judged(conn, guard, scope, now, false).await?;
        if let Some(figures) = judged.figures {
            checked.open.push(Open {
                prefix: scope.prefix.to_owned(),
                kind: scope.kind,
                min_starts: scope.min_starts,
                figures,
            });
        }
        let Some(GuardFinding::Held { hold, new }) = judged.finding else {
            continue;
        };
        let passes = match trust {
            Some(passes) => passes,
            None => *trust.insert(trusted(conn, guard, guard.trusted_since).await?),
        };
        checked.findings.push(match (passes, new) {
            (true, true) => GuardFinding::Placed { hold },
            (true, false) => GuardFinding::Trusted { hold },
            (false, _) => GuardFinding::Held { hold, new },
        });
        if guard.enforce && !passes {
            return Ok(checked);
        }
    }
    for key in keys {
        let count = Sql::new(KEY_COUNT_SQL).bind(key.mac.as_slice());
        if let Some(oldest) = full(conn, count, key.window, now).await? {
            checked.findings.push(GuardFinding::KeyLimited {
                name: key.name.clone(),
                window: key.window,
                oldest,
            });
            if guard.enforce {
                return Ok(checked);
            }
        }
    }
    if let Some(window) = guard.country {
        let count = Sql::new(COUNTRY_COUNT_SQL).bind(&guard.calling_code);
        if let Some(oldest) = full(conn, count, window, now).await? {
            checked.findings.push(GuardFinding::CountryLimited {
                code: guard.calling_code.clone(),
                window,
                oldest,
            });
        }
    }
    Ok(checked)
}

/// Whether a finding refuses the code (when the guard enforces).
pub(in crate::adapters::store) fn refuses(finding: &GuardFinding) -> bool {
    !matches!(
        finding,
        GuardFinding::Placed { .. } | GuardFinding::Trusted { .. } | GuardFinding::Lifted { .. }
    )
}

/// After a code is counted: each open prefix whose figures the code brings to its cap
/// is held from now (the code itself goes out), so the hold is listed, counted and
/// alerted on at once, not at the next call.
pub(in crate::adapters::store) async fn capped(
    conn: &mut Conn<'_>,
    guard: &GuardCheck,
    open: &[Open],
    now: DateTime<Utc>,
) -> Result<Vec<GuardFinding>, StoreError> {
    let mut placed = Vec::new();
    let judged_at_once = guard.decided_before >= now;
    for open in open {
        let after = open.figures.after_code(judged_at_once);
        let Some(unconverted) = after.hold(open.min_starts, guard.min_conversion) else {
            continue;
        };
        let scope = Scope {
            prefix: &open.prefix,
            kind: open.kind,
            min_starts: open.min_starts,
        };
        let hold = put_hold(conn, guard, scope, now, unconverted, after.approved).await?;
        placed.push(GuardFinding::Placed { hold });
    }
    Ok(placed)
}

/// The guard's check of a resend of verification `id`: the call's keys, and those the
/// verification started with that the call does not carry (a resend without keys still
/// costs the end user who started it).
pub(in crate::adapters::store) async fn with_first_keys(
    conn: &mut Conn<'_>,
    guard: &GuardCheck,
    id: ClientId,
) -> Result<GuardCheck, StoreError> {
    let mut guard = guard.clone();
    if guard.key_limits.is_empty() {
        return Ok(guard);
    }
    let sql = Sql::new(FIRST_KEYS_SQL).bind(id_to_db(id.get()));
    let first: Vec<(String, Vec<u8>)> = conn.fetch_all(sql).await?;
    for (name, mac) in first {
        if guard.keys.iter().any(|k| k.mac == mac) {
            continue;
        }
        if let Some((_, window)) = guard.key_limits.iter().find(|(n, _)| *n == name) {
            let window = *window;
            guard.keys.push(KeyCheck { name, mac, window });
        }
    }
    Ok(guard)
}

/// Counts a code sent with `send` to verification `verification`, and its keys, once:
/// false when that send was counted already (a retry of it).
pub(in crate::adapters::store) async fn record(
    conn: &mut Conn<'_>,
    send: ClientId,
    verification: ClientId,
    guard: &GuardCheck,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let (send, verification) = (id_to_db(send.get()), id_to_db(verification.get()));
    let sql = Sql::new(RECORD_CODE_SQL)
        .bind(send)
        .bind(verification)
        .bind(&guard.range)
        .bind(&guard.calling_code)
        .bind(ms(now))
        .bind(!guard.judged)
        .bind(guard.region.as_deref());
    if conn.execute(sql).await? == 0 {
        return Ok(false);
    }
    for key in &guard.keys {
        let sql = Sql::new(RECORD_KEY_SQL)
            .bind(send)
            .bind(verification)
            .bind(&key.name)
            .bind(key.mac.as_slice())
            .bind(ms(now));
        conn.execute(sql).await?;
    }
    Ok(true)
}

/// Uncounts send `send`, which sent nothing (the gateway refused it).
pub(in crate::adapters::store) async fn unsent(
    conn: &mut Conn<'_>,
    send: ClientId,
) -> Result<(), StoreError> {
    for sql in UNSENT_SQL {
        conn.execute(Sql::new(sql).bind(id_to_db(send.get())))
            .await?;
    }
    Ok(())
}

/// Counts a verification approved: its codes are converted, and the keys it started
/// with are trusted from `now` in its number's calling code.
pub(in crate::adapters::store) async fn approved(
    conn: &mut Conn<'_>,
    id: ClientId,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let id = id_to_db(id.get());
    conn.execute(Sql::new(APPROVED_SQL).bind(id)).await?;
    conn.execute(Sql::new(TRUST_SQL).bind(id).bind(ms(now)))
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
