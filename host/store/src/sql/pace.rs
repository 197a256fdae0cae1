//! Pacing of lambdas with a scheduling quota: the poll enqueues a lambda's
//! tasks at most at its rate. Each lambda's next free slot is a row of
//! `lambda_pace`, locked while the poll gives slots out, so concurrent
//! consumers share one pace; a task given a later slot waits for it with
//! `paced` set, so it does not take a second slot when it comes due.

use std::collections::HashMap;

use serde::Serialize;

use super::{Connection, DIALECT};
use crate::names::status::NEXT_ATTEMPT;
use crate::support::{batch_json, sql};
use crate::{EnqueueReport, Millis, Result};

/// A due task the poll would enqueue, before pacing.
pub(super) struct Due {
    pub id: String,
    pub lambda: String,
    /// Given its slot already: it waited for it and goes now.
    pub paced: bool,
    /// Why its last execution lapsed, kept as its error.
    pub lapsed: Option<&'static str>,
    /// Its key, as the database keeps it.
    pub key: Option<String>,
    /// When it came due (its trigger).
    pub due: Millis,
    /// In flight already (enqueued, or its execution lapsed): it holds a
    /// place of its key.
    pub in_flight: bool,
}

/// A task to enqueue now, with the error it keeps.
pub(super) struct Now {
    pub id: String,
    pub lapsed: Option<&'static str>,
}

/// A task that waits for its slot, as the update of [`defer`] reads it
/// (the field names are its JSON keys).
#[derive(Serialize)]
struct Later {
    id: String,
    at: Millis,
    error: Option<&'static str>,
}

/// A lambda idle this long has as many slots at once as it gets in it.
const BURST_MS: f64 = 1000.0;

/// Paces lambdas with a scheduling quota. Of `due`, answers the tasks to
/// enqueue now, in order; every other task of a paced lambda waits for
/// its own slot, given in turn from the lambda's next free one at
/// `1 / quota` apart. A lambda idle for a second has a second's worth of
/// slots at once.
pub(super) async fn pace(
    conn: &mut Connection,
    due: Vec<Due>,
    now: Millis,
    report: &mut EnqueueReport,
) -> Result<Vec<Now>> {
    if due.is_empty() {
        return Ok(Vec::new());
    }
    let quotas = quotas(conn).await?;
    let mut paced: Vec<&str> = due
        .iter()
        .filter(|d| !d.paced && quotas.contains_key(&d.lambda))
        .map(|d| d.lambda.as_str())
        .collect();
    if paced.is_empty() {
        return Ok(due
            .into_iter()
            .map(|d| Now {
                id: d.id,
                lapsed: d.lapsed,
            })
            .collect());
    }
    // One lock order for every consumer: by name.
    paced.sort_unstable();
    paced.dedup();
    let mut slots = take_slots(conn, &paced, now).await?;
    let (now_ids, later) = give_slots(due, &quotas, &mut slots, now);
    save_slots(conn, &slots).await?;
    if !later.is_empty() {
        report.paced = later.len() as u64;
        defer(conn, &later).await?;
    }
    Ok(now_ids)
}

/// The quota of every lambda that has one, at its current version.
async fn quotas(conn: &mut Connection) -> Result<HashMap<String, f64>> {
    let quotas: Vec<(String, f64)> = sqlx::query_as(
        "SELECT l.name, v.quota_per_sec FROM lambdas l JOIN lambda_versions v \
         ON v.lambda = l.name AND v.version = l.current_version \
         WHERE v.quota_per_sec IS NOT NULL",
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(quotas.into_iter().collect())
}

/// Each lambda's next free slot, its row locked (created the first time),
/// no earlier than one burst ago.
async fn take_slots(
    conn: &mut Connection,
    lambdas: &[&str],
    now: Millis,
) -> Result<HashMap<String, f64>> {
    let earliest = now as f64 - BURST_MS;
    let mut slots = HashMap::with_capacity(lambdas.len());
    for lambda in lambdas {
        sqlx::query(
            "INSERT INTO lambda_pace (lambda, next_slot_at) VALUES ($1, $2) \
             ON CONFLICT (lambda) DO NOTHING",
        )
        .bind(lambda)
        .bind(earliest)
        .execute(&mut *conn)
        .await?;
        let next: f64 = sqlx::query_scalar(sql(format!(
            "SELECT next_slot_at FROM lambda_pace WHERE lambda = $1 {}",
            DIALECT.row_lock
        )))
        .bind(lambda)
        .fetch_one(&mut *conn)
        .await?;
        slots.insert((*lambda).to_owned(), next.max(earliest));
    }
    Ok(slots)
}

/// Gives each due task of a paced lambda the lambda's next slot, in due
/// order: a slot already past goes now, a later one waits.
fn give_slots(
    due: Vec<Due>,
    quotas: &HashMap<String, f64>,
    slots: &mut HashMap<String, f64>,
    now: Millis,
) -> (Vec<Now>, Vec<Later>) {
    let mut now_ids = Vec::with_capacity(due.len());
    let mut later = Vec::new();
    for Due {
        id,
        lambda,
        paced,
        lapsed,
        ..
    } in due
    {
        let slot = match slots.get_mut(&lambda) {
            Some(slot) if !paced => slot,
            _ => {
                now_ids.push(Now { id, lapsed });
                continue;
            }
        };
        let at = *slot;
        *slot += 1000.0 / quotas[&lambda];
        if at < now as f64 {
            now_ids.push(Now { id, lapsed });
        } else {
            later.push(Later {
                id,
                at: at.ceil() as Millis,
                error: lapsed,
            });
        }
    }
    (now_ids, later)
}

async fn save_slots(conn: &mut Connection, slots: &HashMap<String, f64>) -> Result<()> {
    for (lambda, next) in slots {
        sqlx::query("UPDATE lambda_pace SET next_slot_at = $2 WHERE lambda = $1")
            .bind(lambda)
            .bind(*next)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// Makes the tasks given a later slot wait for it. A paced task waits like
/// a retrying one: not claimable from a message it may still have on a
/// queue.
async fn defer(conn: &mut Connection, later: &[Later]) -> Result<()> {
    sqlx::query(sql(format!(
        "UPDATE tasks SET next_trigger_at = d.at, paced = TRUE, status = {NEXT_ATTEMPT}, \
         enqueue_token = enqueue_token + 1, last_error = COALESCE(d.paced_error, last_error) \
         FROM (SELECT j.value->>'id' AS paced_id, CAST(j.value->>'at' AS BIGINT) AS at, \
         j.value->>'error' AS paced_error FROM {}) AS d WHERE tasks.id = d.paced_id",
        DIALECT.json_rows
    )))
    .bind(batch_json(later)?)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// After a deploy or rollback, a lambda's tasks paced under its old
/// quota come due now and are paced afresh under the new one.
pub(super) async fn repace(conn: &mut Connection, lambda: &str, now: Millis) -> Result<()> {
    sqlx::query("DELETE FROM lambda_pace WHERE lambda = $1")
        .bind(lambda)
        .execute(&mut *conn)
        .await?;
    sqlx::query(
        "UPDATE tasks SET paced = FALSE, \
         next_trigger_at = CASE WHEN next_trigger_at > $2 THEN $2 ELSE next_trigger_at END \
         WHERE lambda = $1 AND paced = TRUE",
    )
    .bind(lambda)
    .bind(now)
    .execute(&mut *conn)
    .await?;
    Ok(())
}
