//! Rate per key: a token bucket per key of a lambda with a `key_rate`,
//! kept as the key's next free slot in `key_pace`. The
//! poll locks the rows of the keys it gives slots of, in one order (by
//! lambda, then key) for every consumer, so concurrent consumers share one
//! bucket per key; [`super::pace`] gives the slots out. Deploys lock every
//! poll out ([`super::keys::lock_out_polls`]), so a deploy's fresh buckets
//! never meet a poll halfway.

use std::collections::HashMap;

use serde::Serialize;
use waft_core::KeyRate;

use super::keys::Key;
use super::{Connection, DIALECT};
use crate::support::{batch_json, sql};
use crate::{Millis, Result};

/// Each key's next free slot, its row locked (created the first time, or
/// again if the pruner forgot it meanwhile), no earlier than a full bucket
/// allows: an idle key has its `count` tokens, the last of them at `now`.
/// One statement, in one order (by lambda, then key) for every consumer:
/// the conflict's update locks each existing row as the insert reaches it,
/// so two polls wanting the same keys wait for each other the same way
/// round.
pub(super) async fn take(
    conn: &mut Connection,
    keys: &[Key],
    rates: &HashMap<String, KeyRate>,
    now: Millis,
) -> Result<HashMap<Key, f64>> {
    if keys.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Vec<(String, String, f64)> = sqlx::query_as(sql(format!(
        "INSERT INTO key_pace (lambda, key, next_slot_at) \
         SELECT j.value->>'lambda', j.value->>'key', 0 FROM {} WHERE TRUE ORDER BY 1, 2 \
         ON CONFLICT (lambda, key) DO UPDATE SET next_slot_at = key_pace.next_slot_at \
         RETURNING lambda, key, next_slot_at",
        DIALECT.json_rows
    )))
    .bind(batch_json(keys)?)
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(lambda, key, next)| {
            let earliest = rates.get(&lambda).map_or(next, |rate| earliest(*rate, now));
            (Key { lambda, key }, next.max(earliest))
        })
        .collect())
}

/// The earliest slot a key's bucket gives at `now`: full, its last token
/// at `now`.
pub(super) fn earliest(rate: KeyRate, now: Millis) -> f64 {
    now as f64 - (rate.period_ms() as f64 - rate.interval_ms())
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
/// in the past gives as many tokens as no row. Rows a poll holds are
/// skipped (Postgres), not waited for: a poll locks its keys' rows in
/// their keys' order, and this would lock them in their slots' order.
pub(super) async fn forget_idle(conn: &mut Connection, now: Millis) -> Result<()> {
    let longest = i64::try_from(KeyRate::MAX_PERIOD.as_millis()).unwrap_or(i64::MAX);
    sqlx::query(sql(format!(
        "DELETE FROM key_pace WHERE (lambda, key) IN \
         (SELECT t.lambda, t.key FROM key_pace t WHERE t.next_slot_at < $1 {})",
        DIALECT.poll_lock
    )))
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
