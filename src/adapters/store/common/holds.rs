//! The fraud guard's holds as operators see them, in SQL both databases speak: the
//! ranges held now, and a release.

use chrono::{DateTime, Utc};

use super::conn::{Conn, Sql};
use crate::adapters::store::guard::HoldRow;
use crate::adapters::store::rows::ms;
use crate::core::ports::store::{RangeHold, StoreError};

/// Ranges held at `$1`, in range order after `$2`, at most `$3`.
const HELD_SQL: &str = "SELECT * FROM guard_holds
     WHERE until_ms > $1 AND range_prefix > $2 ORDER BY range_prefix LIMIT $3";

/// Ends a range's hold now (`$1` range, `$2` now): it is judged afresh from then on.
const RELEASE_SQL: &str = "UPDATE guard_holds SET until_ms = $2, released_at_ms = $2
     WHERE range_prefix = $1 AND until_ms > $2 RETURNING *";

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
