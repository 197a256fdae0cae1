//! Concurrency per key: at most a lambda's `key_concurrency` of its tasks
//! of one key in flight (enqueued, claimed or processing) at once, across
//! every consumer, controller and executor; and fairness between keys: at
//! most a fair lambda's lookahead of one key's tasks enqueued (waiting in
//! the queue, [`KeyFairness::lookahead`]), so that a key's backlog waits
//! in the store, out of the due tasks' way, and every key's next task
//! reaches the queue at the next poll.
//!
//! The poll decides both, where a task is given the enqueue token its
//! claim needs: a due task whose key has no place left is parked (it waits
//! in the store with no trigger, spending no attempt) instead of enqueued.
//! When a task of a limited lambda's key lands (leaves flight, by whatever
//! statement) — or a task not parked changes state outside flight in any
//! other way, as an unparked one does when a gate holds or drops it, a
//! cancel ends it or its quota paces it instead of taking its place — or,
//! for a fair lambda, leaves the queue (is claimed), a trigger marks its
//! key in `key_landings` in the same transaction (the trigger `tasks_landed`),
//! and the next poll unparks the key's oldest parked tasks, as many as
//! there are places. So a key never has a parked task and a free place
//! past the next poll. Only tasks of a lambda that limits its keys are
//! counted and marked: the poll writes whether one is (`limited`) when it
//! enqueues, paces or parks it, and a deploy that changes it rewrites the
//! lambda's tasks in flight, so a key of a lambda without such a limit
//! costs its tasks' changes of state nothing. Polls count
//! and decide under one lock (`keys_lock`), so two consumers never both
//! take a key's last place, and deploys and rollbacks lock every poll out,
//! so a limit never changes under a poll; an execution that lands
//! meanwhile only adds a mark (marks are only ever added), which the next
//! poll reads.

use std::collections::{BTreeSet, HashMap};

use serde::Serialize;
use waft_core::{KeyFairness, TaskStatus};

use super::pace::Due;
use super::{Connection, DIALECT};
use crate::names::status::{ENQUEUED, IN_FLIGHT, NEXT_ATTEMPT, One};
use crate::rows::row;
use crate::support::{batch_json, sql, text_out};
use crate::{EnqueueReport, Limit, Millis, Result, rows};

row! {
    /// A key of a lambda, as the database keeps it (the field names are the
    /// statements' JSON keys).
    #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
    pub(super) struct Key {
        pub lambda: String,
        pub key: String,
    }
}

/// Keys whose marks a poll consumes at most.
const KEYS_PER_POLL: i64 = 256;

/// How soon a poll comes again while tasks are parked: a landing marks its
/// key but wakes no consumer (it may be another process's result), so the
/// consumer looks again this soon, and a parked task waits at most this
/// long past its key's landing.
const RECHECK_MS: Millis = 20;

/// The limits a poll decides by: the concurrency per key and the fairness
/// of every lambda that has one, read under the keys' lock when any lambda
/// has a limit, so that polls take turns at a key's places. A deploy
/// changing a limit locks every poll out ([`lock_out_polls`]), so it comes
/// wholly before or after the poll, and never deletes a pace or bucket row
/// the poll waits for while it waits for the poll's tasks.
pub(super) struct Limits(HashMap<String, PerKey>);

/// A lambda's limits on each of its keys.
struct PerKey {
    concurrency: Option<i64>,
    fairness: Option<KeyFairness>,
}

/// A key's tasks in flight, of them those enqueued (in the queue), and
/// its tasks given a later slot of a quota or rate: what a fair key has
/// ahead of other keys' tasks.
#[derive(Debug, Clone, Copy, Default)]
struct Flight {
    flying: i64,
    queued: i64,
    slotted: i64,
}

impl PerKey {
    /// How many more of `key`'s tasks may go, with `flight` of them in
    /// flight; and the limit that leaves none, if one does.
    fn places(&self, key: &str, flight: Flight) -> (i64, Option<Limit>) {
        let mut places = (i64::MAX, None);
        if let Some(fairness) = &self.fairness {
            // Weights name keys as given; the database keeps them escaped.
            let key = text_out(key.to_owned());
            places = (
                i64::from(fairness.lookahead(&key)) - flight.queued - flight.slotted,
                Some(Limit::KeyFairness),
            );
        }
        if let Some(limit) = self.concurrency
            && limit - flight.flying <= places.0
        {
            places = (limit - flight.flying, Some(Limit::KeyConcurrency));
        }
        places
    }
}

impl Limits {
    /// Reads the limits, taking the keys' lock first when any lambda has
    /// a limit (of concurrency, fairness or rate per key, or a quota).
    /// Called after the gates' lock and before the poll locks any task, as
    /// a deploy takes the gates' lock before it writes anything: the two
    /// never wait on each other the other way round.
    pub(super) async fn read(conn: &mut Connection) -> Result<Limits> {
        if !any_limit(conn).await? {
            return Ok(Limits(HashMap::new()));
        }
        lock(conn).await?;
        Ok(Limits(limits(conn).await?))
    }

    /// Unparks the oldest parked tasks of every key a change marked, as
    /// many as its lambda's limit leaves places for (every one, when the
    /// lambda has no limit now). The marks are consumed first, in one
    /// statement, and the tasks in flight counted after: a landing that
    /// commits meanwhile has left a mark of its own for the next poll.
    pub(super) async fn unpark_landed(&self, conn: &mut Connection) -> Result<u64> {
        let consumed: Vec<Key> = sqlx::query_as(
            "DELETE FROM key_landings WHERE (lambda, key) IN \
             (SELECT lambda, key FROM key_landings LIMIT $1) RETURNING lambda, key",
        )
        .bind(KEYS_PER_POLL)
        .fetch_all(&mut *conn)
        .await?;
        if consumed.is_empty() {
            return Ok(0);
        }
        let marked: Vec<Key> = consumed
            .into_iter()
            .collect::<BTreeSet<Key>>()
            .into_iter()
            .collect();
        let flying = in_flight(conn, &marked).await?;
        let mut woken = 0;
        for key in &marked {
            let places = match self.0.get(&key.lambda) {
                Some(limits) => {
                    let flight = flying.get(key).copied().unwrap_or_default();
                    limits.places(&key.key, flight).0
                }
                None => i64::MAX,
            };
            if places > 0 {
                woken += unpark(conn, key, places).await?;
            }
        }
        Ok(woken)
    }

    /// The turn a task of `lambda` and `key` takes in its queue: its key
    /// and the key's weight, when the lambda is fair (tasks without a key
    /// take theirs as one key).
    pub(super) fn turn(&self, lambda: &str, key: Option<String>) -> Option<(String, u32)> {
        let fairness = self.0.get(lambda)?.fairness.as_ref()?;
        let key = key.unwrap_or_default();
        let weight = fairness.weight(&text_out(key.clone()));
        Some((key, weight))
    }

    /// Of the tasks the poll would enqueue, those that may go, in due order
    /// (ties by id): a task of a limited lambda's key goes while its key has
    /// places, and is parked otherwise (awaiting its turn when fairness
    /// is what leaves none). A task in flight already (re-enqueued, or
    /// expired) holds its place and goes.
    pub(super) async fn admit(
        &self,
        conn: &mut Connection,
        open: Vec<Due>,
        report: &mut EnqueueReport,
    ) -> Result<Vec<Due>> {
        let limits = &self.0;
        let mut open = open;
        for due in &mut open {
            // Written at its enqueue: a task in flight already is counted
            // by its lambda's limits of now, as a redeploy counts them.
            due.limited = due.key.is_some() && limits.contains_key(&due.lambda);
        }
        let counted = |due: &Due| !due.in_flight && due.limited;
        let keys: BTreeSet<Key> = open
            .iter()
            .filter(|due| counted(due))
            .filter_map(|due| {
                Some(Key {
                    lambda: due.lambda.clone(),
                    key: due.key.clone()?,
                })
            })
            .collect();
        if keys.is_empty() {
            return Ok(open);
        }
        open.sort_by(|a, b| (a.due, &a.id).cmp(&(b.due, &b.id)));
        let keys: Vec<Key> = keys.into_iter().collect();
        let mut flying = in_flight(conn, &keys).await?;
        let mut going = Vec::with_capacity(open.len());
        let mut parked = Vec::new();
        for due in open {
            let (true, Some(key)) = (counted(&due), &due.key) else {
                going.push(due);
                continue;
            };
            let limits = &limits[&due.lambda];
            let flight = flying
                .entry(Key {
                    lambda: due.lambda.clone(),
                    key: key.clone(),
                })
                .or_default();
            if due.paced || due.key_paced {
                // Counted as given a slot until now: it leaves that count
                // for the queue's.
                flight.slotted -= 1;
            }
            match limits.places(key, *flight) {
                (places, _) if places > 0 => {
                    flight.flying += 1;
                    flight.queued += 1;
                    going.push(due);
                }
                (_, limit) => {
                    let limit = limit.unwrap_or(Limit::KeyConcurrency);
                    report.held_back(&due.lambda, limit);
                    parked.push(Parked {
                        id: due.id,
                        turn: u8::from(limit == Limit::KeyFairness),
                    });
                }
            }
        }
        park(conn, &parked).await?;
        report.parked = parked.len() as u64;
        Ok(going)
    }
}

/// When the consumer should poll again for landings: soon, while any task
/// is parked (one probe of the index of parked tasks; every statement here
/// spells its predicate `parked`, as the index does, for SQLite's planner
/// to take it).
pub(super) async fn recheck(conn: &mut Connection, now: Millis) -> Result<Option<Millis>> {
    let parked: Option<i64> =
        sqlx::query_scalar("SELECT CAST(1 AS BIGINT) FROM tasks WHERE parked LIMIT 1")
            .fetch_optional(&mut *conn)
            .await?;
    Ok(parked.map(|_| now.saturating_add(RECHECK_MS)))
}

/// Marks every key with parked tasks of `lambda`, deployed anew or rolled
/// back: its limit may have grown or gone, and the next poll unparks what
/// it allows. Its tasks in flight are counted from now on if its new
/// version limits its keys, and no longer otherwise (`limited`). The caller locked the polls out first ([`lock_out_polls`]),
/// before it wrote anything: a poll that read the old limits has
/// committed what it parked and enqueued by them, which this then sees.
pub(super) async fn redeployed(conn: &mut Connection, lambda: &str) -> Result<()> {
    sqlx::query(
        "INSERT INTO key_landings (lambda, key) \
         SELECT DISTINCT lambda, key FROM tasks WHERE lambda = $1 AND parked",
    )
    .bind(lambda)
    .execute(&mut *conn)
    .await?;
    let limited = limits(conn).await?.contains_key(lambda);
    // Results and heartbeats lock these rows in their batches' order: a
    // deploy waits for them only briefly, then gives way (and is tried
    // again) rather than deadlock with one.
    if !DIALECT.yield_row_locks.is_empty() {
        sqlx::query(DIALECT.yield_row_locks)
            .execute(&mut *conn)
            .await?;
    }
    // Keyed tasks only, but not spelled as a term of its own: SQLite's
    // planner would then read every keyed task of the lambda from their
    // index, where the one of statuses holds only those in flight.
    sqlx::query(sql(format!(
        "UPDATE tasks SET limited = (key IS NOT NULL AND $2) \
         WHERE lambda = $1 AND status IN {IN_FLIGHT} AND limited <> (key IS NOT NULL AND $2)"
    )))
    .bind(lambda)
    .bind(limited)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Takes the keys' lock (Postgres; SQLite has one writer): polls that
/// decide by limits take turns.
async fn lock(conn: &mut Connection) -> Result<()> {
    super::take_lock(conn, DIALECT.keys_lock).await
}

/// Locks every poll out, for a deploy or rollback that may change a
/// lambda's limits (Postgres: the gates' lock, which every poll takes
/// shared first; SQLite has one writer). A poll then comes wholly before
/// or after the change, even one that found no limit anywhere and so took
/// no keys' lock: what it enqueued is counted by the change
/// ([`redeployed`]), or it enqueues by the new limits.
pub(super) async fn lock_out_polls(conn: &mut Connection) -> Result<()> {
    super::take_lock(conn, DIALECT.gate_write_lock).await
}

/// Whether any lambda has, at its current version, a limit a deploy may
/// change under a poll: a concurrency, fairness or a rate per key (whose
/// buckets a deploy refills), or a quota (whose pace it resets).
async fn any_limit(conn: &mut Connection) -> Result<bool> {
    let found: Option<i64> = sqlx::query_scalar(
        "SELECT CAST(1 AS BIGINT) FROM lambdas l JOIN lambda_versions v \
         ON v.lambda = l.name AND v.version = l.current_version \
         WHERE v.key_concurrency IS NOT NULL OR v.key_rate_count IS NOT NULL \
            OR v.quota_per_sec IS NOT NULL OR v.key_fairness IS NOT NULL LIMIT 1",
    )
    .fetch_optional(&mut *conn)
    .await?;
    Ok(found.is_some())
}

row! {
    /// A lambda's limits per key, as [`limits`] reads them.
    struct LimitsRow {
        name: String,
        key_concurrency: Option<i64>,
        key_fairness: Option<String>,
        key_lookahead: Option<i64>,
    }
}

/// The concurrency per key and the fairness of every lambda that has
/// either, at its current version.
async fn limits(conn: &mut Connection) -> Result<HashMap<String, PerKey>> {
    let limits: Vec<LimitsRow> = sqlx::query_as(
        "SELECT l.name, v.key_concurrency, v.key_fairness, v.key_lookahead FROM lambdas l \
         JOIN lambda_versions v ON v.lambda = l.name AND v.version = l.current_version \
         WHERE v.key_concurrency IS NOT NULL OR v.key_fairness IS NOT NULL",
    )
    .fetch_all(&mut *conn)
    .await?;
    limits
        .into_iter()
        .map(|row| {
            let fairness = rows::key_fairness(row.key_fairness.as_deref(), row.key_lookahead)?;
            Ok((
                row.name,
                PerKey {
                    concurrency: row.key_concurrency,
                    fairness,
                },
            ))
        })
        .collect()
}

/// How many tasks of each key are in flight, of them enqueued, and given
/// a later slot, in one statement, from two small partial indexes alone
/// (the counts repeat their predicates for SQLite's planner to take them:
/// a key's other tasks are many). Only a limited lambda's tasks in flight
/// are `limited`, and only its keys are counted.
async fn in_flight(conn: &mut Connection, keys: &[Key]) -> Result<HashMap<Key, Flight>> {
    let counts: Vec<(String, String, i64, i64, i64)> = sqlx::query_as(sql(format!(
        "SELECT j.value->>'lambda', j.value->>'key', \
         (SELECT COUNT(*) FROM tasks t WHERE t.lambda = j.value->>'lambda' \
            AND t.key = j.value->>'key' AND t.limited AND t.status IN {IN_FLIGHT}), \
         (SELECT COUNT(*) FROM tasks t WHERE t.lambda = j.value->>'lambda' \
            AND t.key = j.value->>'key' AND t.limited AND t.status IN {IN_FLIGHT} \
            AND t.status = {ENQUEUED}), \
         (SELECT COUNT(*) FROM tasks t WHERE t.lambda = j.value->>'lambda' \
            AND t.key = j.value->>'key' AND {slotted}) \
         FROM {}",
        DIALECT.json_rows,
        // Given a later slot of its lambda's quota or its key's rate, and
        // waiting for it: the predicate of the index `tasks_slotted`
        // of the schema, spelled as it is.
        slotted = format_args!(
            "t.key IS NOT NULL AND (t.paced OR t.key_paced) AND NOT t.parked \
             AND t.status IN ({}, {})",
            One::of(TaskStatus::New),
            One::of(TaskStatus::RetriableFailure)
        ),
    )))
    .bind(batch_json(keys)?)
    .fetch_all(&mut *conn)
    .await?;
    Ok(counts
        .into_iter()
        .map(|(lambda, key, flying, queued, slotted)| {
            let flight = Flight {
                flying,
                queued,
                slotted,
            };
            (Key { lambda, key }, flight)
        })
        .collect())
}

/// A task [`park`] parks (the field names are its JSON keys): `turn` is 1
/// when it awaits its key's turn.
#[derive(Serialize)]
struct Parked {
    id: String,
    turn: u8,
}

/// Parks tasks, in one update: each waits in the store, not due, its due
/// time kept (the earlier of when it was due and when it was looked at). A
/// task given its key's slot of a rate already keeps it: unparked, it goes
/// without taking another.
async fn park(conn: &mut Connection, tasks: &[Parked]) -> Result<()> {
    if tasks.is_empty() {
        return Ok(());
    }
    sqlx::query(sql(format!(
        "UPDATE tasks SET status = {NEXT_ATTEMPT}, parked = TRUE, limited = TRUE, \
         awaits_turn = (CAST(p.turn AS INTEGER) = 1), \
         due_at = CASE WHEN next_trigger_at < due_at THEN next_trigger_at ELSE due_at END, \
         next_trigger_at = NULL, paced = FALSE, debounced = FALSE \
         FROM (SELECT j.value->>'id' AS park_id, j.value->>'turn' AS turn FROM {}) AS p \
         WHERE tasks.id = p.park_id",
        DIALECT.json_rows
    )))
    .bind(batch_json(tasks)?)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Unparks up to `places` of the key's parked tasks, oldest due first:
/// each is due again at its due time. Answers how many. The tasks are
/// locked as they are chosen (Postgres): one a cancel holds is waited for,
/// and, ended when the cancel commits, fails the check Postgres makes again
/// on the row it waited for and is left out before the limit is reached,
/// so the next parked task takes its place, as after the cancel.
async fn unpark(conn: &mut Connection, key: &Key, places: i64) -> Result<u64> {
    Ok(sqlx::query(sql(format!(
        "UPDATE tasks SET parked = FALSE, awaits_turn = FALSE, next_trigger_at = due_at \
         WHERE parked AND id IN \
         (SELECT id FROM tasks WHERE lambda = $1 AND key = $2 AND parked \
          ORDER BY due_at, id LIMIT $3 {})",
        DIALECT.row_lock
    )))
    .bind(&key.lambda)
    .bind(&key.key)
    .bind(places)
    .execute(&mut *conn)
    .await?
    .rows_affected())
}
