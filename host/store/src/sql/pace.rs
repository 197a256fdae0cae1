//! Pacing of lambdas with a scheduling quota, and of keys with a rate: the
//! poll enqueues a lambda's tasks at most at its quota, and a key's at most
//! at its lambda's rate per key. Each lambda's next free slot is a row of
//! `lambda_pace`, each key's one of `key_pace` ([`super::rate`]), locked
//! while the poll gives slots out, so concurrent consumers share one pace;
//! a task given a later slot waits for it with `paced` (its quota's) or
//! `key_paced` (its key's) set, so it does not take a second slot when it
//! comes due. A task takes its key's slot first, and its lambda's only
//! once its key's has come: a key's backlog does not spend the quota of
//! the lambda's other keys ahead of time.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use serde::Serialize;
use waft_core::KeyRate;

use super::keys::Key;
use super::rate;
use super::{Connection, DIALECT};
use crate::names::status::NEXT_ATTEMPT;
use crate::rows::row;
use crate::support::{batch_json, sql};
use crate::{EnqueueReport, Limit, Millis, Result, StoreError};

/// A due task the poll would enqueue, before pacing.
pub(super) struct Due {
    pub id: String,
    pub lambda: String,
    /// Given its slot of its lambda's quota already: it waited for it and
    /// goes now.
    pub paced: bool,
    /// Given its slot of its key's rate already.
    pub key_paced: bool,
    /// Why its last execution lapsed, kept as its error.
    pub lapsed: Option<&'static str>,
    /// Its key, as the database keeps it.
    pub key: Option<String>,
    /// When it came due (its trigger).
    pub due: Millis,
    /// In flight already (enqueued, or its execution lapsed): it holds a
    /// place of its key.
    pub in_flight: bool,
    /// Its key counts in flight: its lambda limits its keys (decided by
    /// [`keys::Limits::admit`]).
    ///
    /// [`keys::Limits::admit`]: super::keys::Limits::admit
    pub limited: bool,
}

/// A task to enqueue now, with the error it keeps and whether its key
/// counts in flight.
pub(super) struct Now {
    pub id: String,
    pub lapsed: Option<&'static str>,
    pub limited: bool,
}

/// A task that waits for its slot, as the update of [`defer`] reads it
/// (the field names are its JSON keys; the flags are 0 or 1).
#[derive(Serialize)]
struct Later {
    id: String,
    at: Millis,
    error: Option<&'static str>,
    paced: u8,
    key_paced: u8,
    /// Its key counts in flight: written with the wait, so that its
    /// change of state marks its key (a place of which the poll may have
    /// given it, and parked another of the key for).
    limited: u8,
}

/// A lambda idle this long has as many slots at once as it gets in it.
const BURST_MS: f64 = 1000.0;

/// The quotas and rates per key of the lambdas that have them, at their
/// current versions.
struct Pacing {
    quotas: HashMap<String, f64>,
    rates: HashMap<String, KeyRate>,
}

/// The slots a poll gives out: each paced lambda's and rated key's next.
struct Slots {
    lambdas: HashMap<String, f64>,
    keys: HashMap<Key, f64>,
}

/// Paces lambdas with a scheduling quota and keys with a rate. Of `due`,
/// answers the tasks to enqueue now, in order; every other task waits for
/// its own slot, given in turn from its key's or lambda's next free one,
/// `interval` apart. A lambda idle for a second has a second's worth of
/// slots at once; a key idle for its rate's period, its rate's count.
pub(super) async fn pace(
    conn: &mut Connection,
    due: Vec<Due>,
    now: Millis,
    report: &mut EnqueueReport,
) -> Result<Vec<Now>> {
    if due.is_empty() {
        return Ok(Vec::new());
    }
    let pacing = Pacing::read(conn).await?;
    let mut due = due;
    if !pacing.quotas.is_empty() || !pacing.rates.is_empty() {
        // Slots go in due order, ties by id, as places do (`keys::admit`).
        due.sort_by(|a, b| (a.due, &a.id).cmp(&(b.due, &b.id)));
    }
    let mut lambdas: Vec<&str> = due
        .iter()
        .filter(|d| !d.paced && pacing.quotas.contains_key(&d.lambda))
        .map(|d| d.lambda.as_str())
        .collect();
    let keys: BTreeSet<Key> = due
        .iter()
        .filter(|d| !d.paced && !d.key_paced && pacing.rates.contains_key(&d.lambda))
        .filter_map(|d| {
            Some(Key {
                lambda: d.lambda.clone(),
                key: d.key.clone()?,
            })
        })
        .collect();
    if lambdas.is_empty() && keys.is_empty() {
        return Ok(due
            .into_iter()
            .map(|d| Now {
                id: d.id,
                lapsed: d.lapsed,
                limited: d.limited,
            })
            .collect());
    }
    // One lock order for every consumer: by name, keys after lambdas.
    lambdas.sort_unstable();
    lambdas.dedup();
    let keys: Vec<Key> = keys.into_iter().collect();
    let mut slots = Slots {
        lambdas: take_slots(conn, &lambdas, now).await?,
        keys: rate::take(conn, &keys, &pacing.rates, now).await?,
    };
    let (now_ids, later) = give_slots(due, &pacing, &mut slots, now, report);
    save_slots(conn, &slots.lambdas).await?;
    rate::save(conn, &slots.keys).await?;
    defer(conn, &later).await?;
    Ok(now_ids)
}

row! {
    /// A lambda's quota and rate per key, as [`Pacing::read`] selects them.
    struct PacingRow {
        name: String,
        quota_per_sec: Option<f64>,
        key_rate_count: Option<i64>,
        key_rate_period_ms: Option<i64>,
    }
}

impl Pacing {
    /// Reads every lambda's quota and rate per key, in one statement.
    async fn read(conn: &mut Connection) -> Result<Pacing> {
        let rows: Vec<PacingRow> = sqlx::query_as(
            "SELECT l.name, v.quota_per_sec, v.key_rate_count, v.key_rate_period_ms \
             FROM lambdas l JOIN lambda_versions v \
             ON v.lambda = l.name AND v.version = l.current_version \
             WHERE v.quota_per_sec IS NOT NULL OR v.key_rate_count IS NOT NULL",
        )
        .fetch_all(&mut *conn)
        .await?;
        let mut pacing = Pacing {
            quotas: HashMap::new(),
            rates: HashMap::new(),
        };
        for row in rows {
            if let Some(quota) = row.quota_per_sec {
                pacing.quotas.insert(row.name.clone(), quota);
            }
            if let (Some(count), Some(period_ms)) = (row.key_rate_count, row.key_rate_period_ms) {
                let corrupt =
                    |column: &str| StoreError::Corrupt(format!("{column} of {}", row.name));
                let rate = KeyRate {
                    count: u32::try_from(count).map_err(|_| corrupt("key_rate_count"))?,
                    period: Duration::from_millis(
                        u64::try_from(period_ms).map_err(|_| corrupt("key_rate_period_ms"))?,
                    ),
                };
                rate.check().map_err(|_| corrupt("key_rate"))?;
                pacing.rates.insert(row.name, rate);
            }
        }
        Ok(pacing)
    }
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

/// Gives each due task its slots, in due order: first its key's, if its
/// lambda has a rate per key and it has none yet, then its lambda's, if
/// its lambda has a quota. A slot not yet come makes it wait for it (and
/// takes no further slot); once every slot it needs has come, it goes.
fn give_slots(
    due: Vec<Due>,
    pacing: &Pacing,
    slots: &mut Slots,
    now: Millis,
    report: &mut EnqueueReport,
) -> (Vec<Now>, Vec<Later>) {
    let mut now_ids = Vec::with_capacity(due.len());
    let mut later = Vec::new();
    let now_f = now as f64;
    for Due {
        id,
        lambda,
        paced,
        mut key_paced,
        lapsed,
        key,
        limited,
        ..
    } in due
    {
        if !paced {
            if let (false, Some(key), Some(rate)) = (key_paced, key, pacing.rates.get(&lambda)) {
                let slot = slots
                    .keys
                    .entry(Key {
                        lambda: lambda.clone(),
                        key,
                    })
                    .or_insert_with(|| rate::earliest(*rate, now));
                let at = *slot;
                *slot += rate.interval_ms();
                key_paced = true;
                if at > now_f {
                    report.key_paced += 1;
                    report.held_back(&lambda, Limit::KeyRate);
                    later.push(Later {
                        id,
                        at: at.ceil() as Millis,
                        error: lapsed,
                        paced: 0,
                        key_paced: 1,
                        limited: u8::from(limited),
                    });
                    continue;
                }
            }
            if let Some(slot) = slots.lambdas.get_mut(&lambda) {
                let at = *slot;
                *slot += 1000.0 / pacing.quotas[&lambda];
                if at >= now_f {
                    report.paced += 1;
                    report.held_back(&lambda, Limit::Quota);
                    later.push(Later {
                        id,
                        at: at.ceil() as Millis,
                        error: lapsed,
                        paced: 1,
                        key_paced: u8::from(key_paced),
                        limited: u8::from(limited),
                    });
                    continue;
                }
            }
        }
        now_ids.push(Now {
            id,
            lapsed,
            limited,
        });
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
    if later.is_empty() {
        return Ok(());
    }
    sqlx::query(sql(format!(
        "UPDATE tasks SET next_trigger_at = d.at, status = {NEXT_ATTEMPT}, \
         paced = (CAST(d.quota_slot AS INTEGER) = 1), \
         key_paced = (CAST(d.key_slot AS INTEGER) = 1), \
         limited = (CAST(d.limited AS INTEGER) = 1), \
         enqueue_token = enqueue_token + 1, last_error = COALESCE(d.paced_error, last_error) \
         FROM (SELECT j.value->>'id' AS paced_id, CAST(j.value->>'at' AS BIGINT) AS at, \
         j.value->>'error' AS paced_error, j.value->>'paced' AS quota_slot, \
         j.value->>'key_paced' AS key_slot, j.value->>'limited' AS limited FROM {}) AS d \
         WHERE tasks.id = d.paced_id",
        DIALECT.json_rows
    )))
    .bind(batch_json(later)?)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// After a deploy or rollback, a lambda's tasks paced under its old
/// quota or rate come due now and are paced afresh under the new ones.
pub(super) async fn repace(conn: &mut Connection, lambda: &str, now: Millis) -> Result<()> {
    sqlx::query("DELETE FROM lambda_pace WHERE lambda = $1")
        .bind(lambda)
        .execute(&mut *conn)
        .await?;
    rate::reset(conn, lambda).await?;
    sqlx::query(
        "UPDATE tasks SET paced = FALSE, key_paced = FALSE, \
         next_trigger_at = CASE WHEN next_trigger_at > $2 THEN $2 ELSE next_trigger_at END \
         WHERE lambda = $1 AND (paced OR key_paced)",
    )
    .bind(lambda)
    .bind(now)
    .execute(&mut *conn)
    .await?;
    Ok(())
}
