//! Rate per key: a token bucket per key of a lambda with a `key_rate`,
//! kept as the key's next free slot in `key_pace` (migration 0026). The
//! poll locks the rows of the keys it gives slots of, in one order (by
//! lambda, then key) for every consumer, so concurrent consumers share one
//! bucket per key; [`super::pace`] gives the slots out.

use std::collections::HashMap;

use serde::Serialize;
use waft_core::KeyRate;

use super::keys::Key;
use super::{Connection, DIALECT};
use crate::support::{batch_json, sql};
use crate::{Millis, Result};

/// Each key's next free slot, its row locked (created the first time), no
/// earlier than a full bucket allows: an idle key has its `count` tokens,
/// the last of them at `now`.
pub(super) async fn take(
    conn: &mut Connection,
    keys: &[Key],
    rates: &HashMap<String, KeyRate>,
    now: Millis,
) -> Result<HashMap<Key, f64>> {
    if keys.is_empty() {
        return Ok(HashMap::new());
    }
    let keys_json = batch_json(keys)?;
    // In one order, as the rows are locked below: two consumers creating
    // rows of the same keys wait for each other the same way round.
    sqlx::query(sql(format!(
        "INSERT INTO key_pace (lambda, key, next_slot_at) \
         SELECT j.value->>'lambda', j.value->>'key', 0 FROM {} WHERE TRUE ORDER BY 1, 2 \
         ON CONFLICT (lambda, key) DO NOTHING",
        DIALECT.json_rows
    )))
    .bind(&keys_json)
    .execute(&mut *conn)
    .await?;
    let rows: Vec<(String, String, f64)> = sqlx::query_as(sql(format!(
        "SELECT lambda, key, next_slot_at FROM key_pace WHERE (lambda, key) IN \
         (SELECT j.value->>'lambda', j.value->>'key' FROM {}) ORDER BY lambda, key {}",
        DIALECT.json_rows, DIALECT.row_lock
    )))
    .bind(&keys_json)
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(lambda, key, next)| {
            let rate = rates[&lambda];
            let earliest = now as f64 - (rate.period_ms() as f64 - rate.interval_ms());
            (Key { lambda, key }, next.max(earliest))
        })
        .collect())
}

/// Keeps each key's next free slot.
pub(super) async fn save(conn: &mut Connection, slots: &HashMap<Key, f64>) -> Result<()> {
    #[derive(Serialize)]
    struct Slot<'a> {
        lambda: &'a str,
        key: &'a str,
        at: f64,
    }
    if slots.is_empty() {
        return Ok(());
    }
    let rows: Vec<Slot> = slots
        .iter()
        .map(|(key, at)| Slot {
            lambda: &key.lambda,
            key: &key.key,
            at: *at,
        })
        .collect();
    sqlx::query(sql(format!(
        "UPDATE key_pace SET next_slot_at = CAST(s.at AS DOUBLE PRECISION) \
         FROM (SELECT j.value->>'lambda' AS slot_lambda, j.value->>'key' AS slot_key, \
         j.value->>'at' AS at FROM {}) AS s \
         WHERE key_pace.lambda = s.slot_lambda AND key_pace.key = s.slot_key",
        DIALECT.json_rows
    )))
    .bind(batch_json(&rows)?)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Forgets the buckets of keys idle for the longest period: a slot that far
/// in the past gives as many tokens as no row.
pub(super) async fn forget_idle(conn: &mut Connection, now: Millis) -> Result<()> {
    let longest = i64::try_from(KeyRate::MAX_PERIOD.as_millis()).unwrap_or(i64::MAX);
    sqlx::query("DELETE FROM key_pace WHERE next_slot_at < $1")
        .bind(now.saturating_sub(longest) as f64)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// After a deploy or rollback, the lambda's keys start with full buckets
/// under the new rate (the caller comes due the tasks that waited for a
/// slot under the old one).
pub(super) async fn reset(conn: &mut Connection, lambda: &str) -> Result<()> {
    sqlx::query("DELETE FROM key_pace WHERE lambda = $1")
        .bind(lambda)
        .execute(&mut *conn)
        .await?;
    Ok(())
}
