//! Periodic schedules and their occurrences, each materialised once.

use waft_core::task::{check_collection_name, check_key, check_lambda_name};

use super::lambda;
use super::{Connection, Store};
use crate::rows::{self, CRON_COLUMNS};
use crate::rules::Origin;
use crate::support::{sql, text_in};
use crate::{Cron, CronMaterialize, Materialized, Millis, NewTask, Result, StoreError};

pub(super) async fn create(tx: &mut Connection, schedule: Cron) -> Result<()> {
    check_lambda_name(&schedule.lambda)?;
    if let Some(collection) = &schedule.collection {
        check_collection_name(collection)?;
    }
    if let Some(key) = &schedule.key {
        check_key(key).map_err(StoreError::Invalid)?;
    }
    let lambda = lambda::require_lambda(&mut *tx, &schedule.lambda).await?;
    if let Some(priority) = schedule.priority
        && priority >= lambda.config.priorities
    {
        return Err(StoreError::InvalidPriority {
            lambda: lambda.name,
            priority,
            max: lambda.config.priorities - 1,
        });
    }
    if schedule.payload.len() as u64 > lambda.config.max_payload.bytes() {
        return Err(StoreError::PayloadTooLarge {
            lambda: lambda.name,
            size: schedule.payload.len(),
            max: lambda.config.max_payload.bytes(),
        });
    }
    sqlx::query(
        "INSERT INTO crons (id, lambda, cron, timezone, payload, collection, priority, \
         catch_up, next_at, created_at, key) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
    )
    .bind(&schedule.id)
    .bind(&schedule.lambda)
    .bind(&schedule.cron)
    .bind(&schedule.timezone)
    .bind(&schedule.payload)
    .bind(&schedule.collection)
    .bind(schedule.priority.map(i64::from))
    .bind(schedule.catch_up)
    .bind(schedule.next_at)
    .bind(schedule.created_at)
    .bind(schedule.key.as_deref().map(text_in))
    .execute(&mut *tx)
    .await?;
    Ok(())
}

pub(super) async fn list(store: &Store) -> Result<Vec<Cron>> {
    let rows = sqlx::query(sql(format!("SELECT {CRON_COLUMNS} FROM crons ORDER BY id")))
        .fetch_all(&store.pool)
        .await?;
    rows.iter().map(rows::cron).collect()
}

pub(super) async fn delete(tx: &mut Connection, id: &str) -> Result<bool> {
    let deleted = sqlx::query("DELETE FROM crons WHERE id = $1")
        .bind(text_in(id))
        .execute(&mut *tx)
        .await?
        .rows_affected();
    Ok(deleted == 1)
}

pub(super) async fn due(store: &Store, now: Millis, limit: u32) -> Result<Vec<Cron>> {
    let rows = sqlx::query(sql(format!(
        "SELECT {CRON_COLUMNS} FROM crons WHERE next_at <= $1 ORDER BY next_at LIMIT $2"
    )))
    .bind(now)
    .bind(i64::from(limit))
    .fetch_all(&store.pool)
    .await?;
    rows.iter().map(rows::cron).collect()
}

pub(super) async fn materialize(
    tx: &mut Connection,
    params: CronMaterialize,
) -> Result<Materialized> {
    let row = sqlx::query(sql(format!(
        "UPDATE crons SET next_at = $3 WHERE id = $1 AND next_at = $2 \
         RETURNING {CRON_COLUMNS}"
    )))
    .bind(&params.cron_id)
    .bind(params.expected)
    .bind(params.next_at)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(row) = row else {
        let exists = sqlx::query("SELECT 1 FROM crons WHERE id = $1")
            .bind(&params.cron_id)
            .fetch_optional(&mut *tx)
            .await?;
        return match exists {
            Some(_) => Ok(Materialized::AlreadyDone),
            None => Err(StoreError::CronNotFound(params.cron_id)),
        };
    };
    let schedule = rows::cron(&row)?;
    let task = NewTask {
        lambda: schedule.lambda,
        collection: schedule.collection,
        priority: schedule.priority,
        payload: schedule.payload,
        run_at: Some(params.occurrence),
        idempotency_key: Some(format!("cron:{}:{}", schedule.id, params.occurrence)),
        key: schedule.key,
        debounce: None,
        parent_id: None,
        version: None,
        parent_lease: None,
        continuation: None,
        // A cron's task starts a trace of its own, at its enqueue.
        trace: None,
        id: None,
    };
    // Refused input is found before anything is written: the
    // schedule still moves on, past the occurrence it skips.
    let answer = match super::insert::insert(
        &mut *tx,
        vec![task],
        Some(&schedule.id),
        Origin::Store,
        params.now,
    )
    .await
    {
        Ok(mut inserted) => {
            let inserted = inserted.remove(0);
            if inserted.created {
                Materialized::Created(inserted.id)
            } else {
                Materialized::AlreadyDone
            }
        }
        Err(StoreError::Database(error)) => return Err(StoreError::Database(error)),
        Err(refused) => Materialized::Skipped(refused.to_string()),
    };
    Ok(answer)
}
