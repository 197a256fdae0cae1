//! Task history: the minutes the dashboard's charts draw (`task_minutes`,
//! `task_latency`).
//!
//! The HSCs add their counts to a row per `<lambda, minute>` with an
//! additive upsert, so several of them may add to one row; the latency
//! histogram is a row per non-empty bucket, added to the same way. Rows are
//! written in key order, so two HSCs adding to the same minutes on Postgres
//! wait for each other instead of deadlocking. The queue depth sampler sets
//! a minute's depth (one sampler at a time holds its duty) of the lambdas
//! with tasks waiting, and marks the minute sampled with a row of lambda
//! `""` (no lambda's name) at depth 0: a lambda's read takes the mark too,
//! so an idle lambda reads as 0 in a sampled minute without a row of its
//! own. A read adds the lambdas together when it is not of one lambda.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Connection, DIALECT, Store};
use crate::rows::RowExt;
use crate::support::{batch_json, sql, text_in};
use crate::{
    HistoryAdd, HistoryDepth, HistoryMinute, HistoryPrune, HistoryRead, LatencyHistogram, Millis,
    MinuteCounts, Result, StoreError,
};

/// A minute's counts as the upsert reads them (the keys are its JSON keys).
#[derive(Serialize)]
struct CountRow<'a> {
    lambda: &'a str,
    minute: Millis,
    succeeded: i64,
    failed: i64,
    /// Not `dead`: statements never spell a status (`names.rs`).
    #[serde(rename = "died")]
    dead: i64,
}

/// A latency bucket's count, or a depth, as the upserts read them.
#[derive(Serialize)]
struct BucketRow<'a> {
    lambda: &'a str,
    minute: Millis,
    bucket: i64,
    n: i64,
}

fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

pub(super) async fn add(tx: &mut Connection, params: HistoryAdd) -> Result<()> {
    // One row per key (an upsert may not touch a row twice), in key order.
    let mut merged: BTreeMap<(String, Millis), MinuteCounts> = BTreeMap::new();
    for counts in params.minutes {
        let key = (counts.lambda.clone(), counts.minute);
        match merged.get_mut(&key) {
            Some(kept) => kept.merge(&counts),
            None => {
                merged.insert(key, counts);
            }
        }
    }
    let counts: Vec<_> = merged
        .values()
        .filter(|c| c.succeeded + c.failed + c.dead > 0)
        .map(|c| CountRow {
            lambda: &c.lambda,
            minute: c.minute,
            succeeded: signed(c.succeeded),
            failed: signed(c.failed),
            dead: signed(c.dead),
        })
        .collect();
    if !counts.is_empty() {
        sqlx::query(sql(format!(
            "INSERT INTO task_minutes (lambda, minute, succeeded, failed, dead) \
             SELECT j.value->>'lambda', CAST(j.value->>'minute' AS BIGINT), \
             CAST(j.value->>'succeeded' AS BIGINT), CAST(j.value->>'failed' AS BIGINT), \
             CAST(j.value->>'died' AS BIGINT) FROM {} WHERE TRUE \
             ON CONFLICT (lambda, minute) DO UPDATE SET \
             succeeded = task_minutes.succeeded + excluded.succeeded, \
             failed = task_minutes.failed + excluded.failed, \
             dead = task_minutes.dead + excluded.dead",
            DIALECT.json_rows
        )))
        .bind(batch_json(&counts)?)
        .execute(&mut *tx)
        .await?;
    }
    let buckets: Vec<_> = merged
        .values()
        .flat_map(|c| {
            c.latency.nonzero().map(|(bucket, n)| BucketRow {
                lambda: &c.lambda,
                minute: c.minute,
                bucket: bucket as i64,
                n: signed(n),
            })
        })
        .collect();
    if !buckets.is_empty() {
        sqlx::query(sql(format!(
            "INSERT INTO task_latency (lambda, minute, bucket, n) \
             SELECT j.value->>'lambda', CAST(j.value->>'minute' AS BIGINT), \
             CAST(j.value->>'bucket' AS BIGINT), CAST(j.value->>'n' AS BIGINT) FROM {} \
             WHERE TRUE ON CONFLICT (lambda, minute, bucket) DO UPDATE SET \
             n = task_latency.n + excluded.n",
            DIALECT.json_rows
        )))
        .bind(batch_json(&buckets)?)
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
}

pub(super) async fn depth(tx: &mut Connection, params: HistoryDepth) -> Result<()> {
    let mut samples: BTreeMap<(&str, Millis), u64> = BTreeMap::new();
    for sample in &params.samples {
        samples.insert((&sample.lambda, sample.minute), sample.depth);
    }
    let rows: Vec<_> = samples
        .into_iter()
        .map(|((lambda, minute), depth)| BucketRow {
            lambda,
            minute,
            bucket: 0,
            n: signed(depth),
        })
        .collect();
    if rows.is_empty() {
        return Ok(());
    }
    sqlx::query(sql(format!(
        "INSERT INTO task_minutes (lambda, minute, depth) \
         SELECT j.value->>'lambda', CAST(j.value->>'minute' AS BIGINT), \
         CAST(j.value->>'n' AS BIGINT) FROM {} WHERE TRUE \
         ON CONFLICT (lambda, minute) DO UPDATE SET depth = excluded.depth",
        DIALECT.json_rows
    )))
    .bind(batch_json(&rows)?)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

pub(super) async fn read(store: &Store, params: HistoryRead) -> Result<Vec<HistoryMinute>> {
    let mut minutes: BTreeMap<Millis, HistoryMinute> = BTreeMap::new();
    let rows = sqlx::query(
        "SELECT minute, CAST(SUM(succeeded) AS BIGINT) AS succeeded, \
         CAST(SUM(failed) AS BIGINT) AS failed, CAST(SUM(dead) AS BIGINT) AS dead, \
         CAST(SUM(depth) AS BIGINT) AS depth FROM task_minutes \
         WHERE minute >= $1 AND minute < $2 AND ($3 IS NULL OR lambda = $3 OR lambda = '') \
         GROUP BY minute",
    )
    .bind(params.from)
    .bind(params.to)
    .bind(params.lambda.as_deref().map(text_in))
    .fetch_all(&store.pool)
    .await?;
    for row in &rows {
        let minute = row.int("minute")?;
        minutes.insert(
            minute,
            HistoryMinute {
                minute,
                succeeded: count(row.int("succeeded")?)?,
                failed: count(row.int("failed")?)?,
                dead: count(row.int("dead")?)?,
                depth: row.opt_int("depth")?.map(count).transpose()?,
                latency: LatencyHistogram::default(),
            },
        );
    }
    let rows = sqlx::query(
        "SELECT minute, bucket, CAST(SUM(n) AS BIGINT) AS n FROM task_latency \
         WHERE minute >= $1 AND minute < $2 AND ($3 IS NULL OR lambda = $3) \
         GROUP BY minute, bucket",
    )
    .bind(params.from)
    .bind(params.to)
    .bind(params.lambda.as_deref().map(text_in))
    .fetch_all(&store.pool)
    .await?;
    for row in &rows {
        let minute = row.int("minute")?;
        let bucket = usize::try_from(row.int("bucket")?)
            .map_err(|_| StoreError::Corrupt("a negative latency bucket".into()))?;
        let entry = minutes.entry(minute).or_insert_with(|| HistoryMinute {
            minute,
            ..HistoryMinute::default()
        });
        entry.latency.add(bucket, count(row.int("n")?)?);
    }
    Ok(minutes.into_values().collect())
}

pub(super) async fn prune(tx: &mut Connection, params: HistoryPrune) -> Result<u64> {
    let mut deleted = 0;
    for table in ["task_minutes", "task_latency"] {
        deleted += sqlx::query(sql(format!("DELETE FROM {table} WHERE minute < $1")))
            .bind(params.before)
            .execute(&mut *tx)
            .await?
            .rows_affected();
    }
    Ok(deleted)
}

fn count(n: i64) -> Result<u64> {
    u64::try_from(n).map_err(|_| StoreError::Corrupt("a negative count in the history".into()))
}
