//! The SQL of the fraud guard, which both databases speak, and the functions each store
//! runs it with inside the transaction that starts a verification (generated per
//! connection type, as in `verification_sql`: only the types differ).

/// The hold of a range, whatever its state (`$1` range).
pub(super) const HOLD_SQL: &str = "SELECT * FROM guard_holds WHERE range_prefix = $1";

/// A range's approved and unconverted verifications, and the codes sent to its
/// unapproved ones whatever their age (`$1` range, `$2` counted after, `$3` an
/// unapproved one at or before this is unconverted).
pub(super) const STATS_SQL: &str = "SELECT
       COALESCE(SUM(CASE WHEN approved THEN 1 ELSE 0 END), 0),
       COALESCE(SUM(CASE WHEN NOT approved AND started_at_ms <= $3 THEN 1 ELSE 0 END), 0),
       CAST(COALESCE(SUM(CASE WHEN approved THEN 0 ELSE sends END), 0) AS BIGINT)
     FROM guard_starts WHERE range_prefix = $1 AND started_at_ms > $2";

/// Ends a hold whose figures recovered (`$1` range, `$2` now).
pub(super) const LIFT_SQL: &str = "UPDATE guard_holds SET until_ms = $2 WHERE range_prefix = $1";

/// Counts a resend of a verification (`$1` id).
pub(super) const RESENT_SQL: &str =
    "UPDATE guard_starts SET sends = sends + 1 WHERE verification_id = $1";

/// Holds a range (`$1`..`$6`), keeping when it was last released.
pub(super) const PUT_HOLD_SQL: &str = "INSERT INTO guard_holds
     (range_prefix, held_at_ms, until_ms, shadow, unconverted, approved)
     VALUES ($1, $2, $3, $4, $5, $6)
     ON CONFLICT (range_prefix) DO UPDATE SET held_at_ms = excluded.held_at_ms,
       until_ms = excluded.until_ms, shadow = excluded.shadow,
       unconverted = excluded.unconverted, approved = excluded.approved";

/// Starts of a calling code in its window (`$1` code, `$2` after): how many, the oldest.
pub(super) const COUNTRY_COUNT_SQL: &str = "SELECT COUNT(*), MIN(started_at_ms) FROM guard_starts
     WHERE calling_code = $1 AND started_at_ms > $2";

/// Starts of a key in its window (`$1` mac, `$2` after): how many, the oldest.
pub(super) const KEY_COUNT_SQL: &str = "SELECT COUNT(*), MIN(started_at_ms) FROM guard_keys
     WHERE key_mac = $1 AND started_at_ms > $2";

/// Counts a started verification (`$1` id, `$2` range, `$3` calling code, `$4` now).
pub(super) const RECORD_START_SQL: &str = "INSERT INTO guard_starts
     (verification_id, range_prefix, calling_code, started_at_ms, approved)
     VALUES ($1, $2, $3, $4, FALSE) ON CONFLICT DO NOTHING";

/// Counts a key of a started verification (`$1` id, `$2` mac, `$3` now).
pub(super) const RECORD_KEY_SQL: &str =
    "INSERT INTO guard_keys (verification_id, key_mac, started_at_ms)
     VALUES ($1, $2, $3) ON CONFLICT DO NOTHING";

/// Counts a verification approved (`$1` id).
pub(super) const APPROVED_SQL: &str =
    "UPDATE guard_starts SET approved = TRUE WHERE verification_id = $1";

/// Forgets what was counted of a verification whose first send was refused (`$1`).
pub(super) const FORGET_SQL: [&str; 2] = [
    "DELETE FROM guard_keys WHERE verification_id = $1",
    "DELETE FROM guard_starts WHERE verification_id = $1",
];

/// Ranges held at `$1`, in range order after `$2`, at most `$3`.
pub(super) const HELD_SQL: &str = "SELECT * FROM guard_holds
     WHERE until_ms > $1 AND range_prefix > $2 ORDER BY range_prefix LIMIT $3";

/// Ends a range's hold now (`$1` range, `$2` now): it is judged afresh from then on.
pub(super) const RELEASE_SQL: &str = "UPDATE guard_holds SET until_ms = $2, released_at_ms = $2
     WHERE range_prefix = $1 AND until_ms > $2 RETURNING *";

/// Statements that make checks of one range, key or calling code take turns across
/// replicas, in the order they are taken (range, keys by [`super::guard::key_lock`],
/// calling code), so two starts never wait on each other.
#[derive(Debug, Clone, Copy)]
pub(super) struct Locks {
    /// Locks a range (`$1`).
    pub range: &'static str,
    /// Locks a key (`$1` its lock number).
    pub key: &'static str,
    /// Locks a calling code (`$1`).
    pub country: &'static str,
}

/// Generates a store's guard functions over its connection type.
macro_rules! guard_queries {
    ($conn:ty, locks: $locks:expr) => {
        use chrono::{DateTime, Utc};

        use crate::domain::ClientId;
        use crate::store::StoreError;
        use crate::store::guard::{
            Figures, GuardCheck, GuardFinding, HoldRow, RangeHold, Window, key_lock,
        };
        use crate::store::guard_sql::{
            APPROVED_SQL, COUNTRY_COUNT_SQL, FORGET_SQL, HELD_SQL, HOLD_SQL, KEY_COUNT_SQL,
            LIFT_SQL, Locks, PUT_HOLD_SQL, RECORD_KEY_SQL, RECORD_START_SQL, RELEASE_SQL,
            RESENT_SQL, STATS_SQL,
        };
        use crate::store::rows::{from_ms, id_to_db, ms};

        const LOCKS: Option<Locks> = $locks;

        async fn lock(
            conn: &mut $conn,
            sql: Option<&str>,
            key: impl ToString,
        ) -> Result<(), StoreError> {
            if let Some(sql) = sql {
                sqlx::query(sql)
                    .bind(key.to_string())
                    .execute(&mut *conn)
                    .await?;
            }
            Ok(())
        }

        /// Counts since `since` against `window`: the oldest start when it is full.
        async fn full(
            conn: &mut $conn,
            sql: &str,
            key: impl for<'q> sqlx::Encode<'q, <$conn as sqlx::Connection>::Database>
            + sqlx::Type<<$conn as sqlx::Connection>::Database>
            + Send
            + 'static,
            window: Window,
            now: DateTime<Utc>,
        ) -> Result<Option<DateTime<Utc>>, StoreError> {
            let (count, oldest): (i64, Option<i64>) = sqlx::query_as(sql)
                .bind(key)
                .bind(ms(window.since))
                .fetch_one(&mut *conn)
                .await?;
            if count < i64::from(window.max) {
                return Ok(None);
            }
            Ok(Some(oldest.map_or(Ok(now), from_ms)?))
        }

        /// Judges the range of `guard` by its figures now, under its lock: its hold
        /// in force as a finding; else a hold placed if the figures call for one. With
        /// `lift`, a hold whose figures no longer call for it (its verifications were
        /// approved since) ends now instead, and `Lifted` says so.
        async fn judge(
            conn: &mut $conn,
            guard: &GuardCheck,
            now: DateTime<Utc>,
            lift: bool,
        ) -> Result<Option<GuardFinding>, StoreError> {
            lock(conn, LOCKS.map(|l| l.range), &guard.range).await?;
            let row: Option<HoldRow> = sqlx::query_as(HOLD_SQL)
                .bind(&guard.range)
                .fetch_optional(&mut *conn)
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
            // A hold placed in shadow mode is not enforced when the guard is on: the
            // range is judged again, and held for real if it still should be.
            let active = active.filter(|hold| !hold.shadow || !guard.enforce);
            if active.is_some() && !lift {
                return Ok(active.map(|hold| GuardFinding::Held { hold, new: false }));
            }
            // Starts in the millisecond of a release came after it.
            let since = released_at.map_or(guard.since, |r| {
                (r - chrono::Duration::milliseconds(1)).max(guard.since)
            });
            let (approved, unconverted, unapproved_sends): (i64, i64, i64) =
                sqlx::query_as(STATS_SQL)
                    .bind(&guard.range)
                    .bind(ms(since))
                    .bind(ms(guard.decided_before))
                    .fetch_one(&mut *conn)
                    .await?;
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
                sqlx::query(LIFT_SQL)
                    .bind(&guard.range)
                    .bind(ms(now))
                    .execute(&mut *conn)
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
            sqlx::query(PUT_HOLD_SQL)
                .bind(&hold.range)
                .bind(ms(hold.held_at))
                .bind(ms(hold.until))
                .bind(hold.shadow)
                .bind(i64::from(hold.unconverted))
                .bind(i64::from(hold.approved))
                .execute(&mut *conn)
                .await?;
            Ok(Some(GuardFinding::Held { hold, new: true }))
        }

        /// Judges a range outside a start (a resend, an approval) in the caller's
        /// transaction; see `judge`.
        pub(in crate::store) async fn judge_range(
            conn: &mut $conn,
            guard: &GuardCheck,
            now: DateTime<Utc>,
            lift: bool,
        ) -> Result<Option<GuardFinding>, StoreError> {
            judge(conn, guard, now, lift).await
        }

        /// Checks a start against the guard, holding its range if its figures say so
        /// (the hold is written in the caller's transaction). With `enforce`, stops at
        /// the first finding: the start is refused anyway.
        pub(in crate::store) async fn check(
            conn: &mut $conn,
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
                lock(conn, LOCKS.map(|l| l.key), key_lock(&key.mac)).await?;
                if let Some(oldest) =
                    full(conn, KEY_COUNT_SQL, key.mac.clone(), key.window, now).await?
                {
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
                lock(conn, LOCKS.map(|l| l.country), &guard.calling_code).await?;
                if let Some(oldest) = full(
                    conn,
                    COUNTRY_COUNT_SQL,
                    guard.calling_code.clone(),
                    window,
                    now,
                )
                .await?
                {
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
        pub(in crate::store) async fn record(
            conn: &mut $conn,
            id: ClientId,
            guard: &GuardCheck,
            now: DateTime<Utc>,
        ) -> Result<(), StoreError> {
            let id = id_to_db(id.get());
            sqlx::query(RECORD_START_SQL)
                .bind(id)
                .bind(&guard.range)
                .bind(&guard.calling_code)
                .bind(ms(now))
                .execute(&mut *conn)
                .await?;
            for key in &guard.keys {
                sqlx::query(RECORD_KEY_SQL)
                    .bind(id)
                    .bind(key.mac.clone())
                    .bind(ms(now))
                    .execute(&mut *conn)
                    .await?;
            }
            Ok(())
        }

        /// Counts a resend of a verification.
        pub(in crate::store) async fn resent(
            conn: &mut $conn,
            id: ClientId,
        ) -> Result<(), StoreError> {
            sqlx::query(RESENT_SQL)
                .bind(id_to_db(id.get()))
                .execute(&mut *conn)
                .await?;
            Ok(())
        }

        /// Counts a verification approved.
        pub(in crate::store) async fn approved(
            conn: &mut $conn,
            id: ClientId,
        ) -> Result<(), StoreError> {
            sqlx::query(APPROVED_SQL)
                .bind(id_to_db(id.get()))
                .execute(&mut *conn)
                .await?;
            Ok(())
        }

        /// Forgets what was counted of a verification.
        pub(in crate::store) async fn forget(
            conn: &mut $conn,
            id: ClientId,
        ) -> Result<(), StoreError> {
            for sql in FORGET_SQL {
                sqlx::query(sql)
                    .bind(id_to_db(id.get()))
                    .execute(&mut *conn)
                    .await?;
            }
            Ok(())
        }

        /// The hold of a range in force at `now`.
        pub(in crate::store) async fn hold_of(
            conn: &mut $conn,
            range: &str,
            now: DateTime<Utc>,
        ) -> Result<Option<RangeHold>, StoreError> {
            let row: Option<HoldRow> = sqlx::query_as(HOLD_SQL)
                .bind(range)
                .fetch_optional(&mut *conn)
                .await?;
            Ok(row
                .map(RangeHold::try_from)
                .transpose()?
                .filter(|h| h.until > now))
        }

        /// Ranges held at `now`, in range order after `after`, at most `limit`.
        pub(in crate::store) async fn held(
            conn: &mut $conn,
            now: DateTime<Utc>,
            after: &str,
            limit: u32,
        ) -> Result<Vec<RangeHold>, StoreError> {
            let rows: Vec<HoldRow> = sqlx::query_as(HELD_SQL)
                .bind(ms(now))
                .bind(after)
                .bind(i64::from(limit))
                .fetch_all(&mut *conn)
                .await?;
            rows.into_iter().map(RangeHold::try_from).collect()
        }

        /// Ends a range's hold at `now`; `None` when it was not held.
        pub(in crate::store) async fn release(
            conn: &mut $conn,
            range: &str,
            now: DateTime<Utc>,
        ) -> Result<Option<RangeHold>, StoreError> {
            let row: Option<HoldRow> = sqlx::query_as(RELEASE_SQL)
                .bind(range)
                .bind(ms(now))
                .fetch_optional(&mut *conn)
                .await?;
            row.map(RangeHold::try_from).transpose()
        }
    };
}

/// The guard functions of the SQLite store (its one writer already serializes them).
pub(super) mod sqlite {
    guard_queries!(sqlx::SqliteConnection, locks: None);
}

/// The guard functions of the PostgreSQL store.
pub(super) mod postgres {
    guard_queries!(sqlx::PgConnection, locks: Some(Locks {
        range: "SELECT pg_advisory_xact_lock(hashtext('msgw.guard.range'), hashtext($1))",
        key: "SELECT pg_advisory_xact_lock(hashtext('msgw.guard.key'), $1::int4)",
        country: "SELECT pg_advisory_xact_lock(hashtext('msgw.guard.country'), hashtext($1))",
    }));
}
