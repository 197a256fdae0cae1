//! Gates: pausing, dropping and opening a lambda or collection.

use waft_core::task::{check_collection_name, check_lambda_name};

use super::lambda;
use super::{Connection, DIALECT, GATE_OF_TASK, Store, take_lock};
use crate::names::status::UNFINISHED;
use crate::rows::row;
use crate::support::sql;
use crate::{Gate, GateSet, GateState, Result, StoreError};

pub(super) async fn set(tx: &mut Connection, params: GateSet) -> Result<u64> {
    check_lambda_name(&params.lambda)?;
    if let Some(collection) = &params.collection {
        check_collection_name(collection)?;
    }
    let collection = params.collection.unwrap_or_default();
    take_lock(&mut *tx, DIALECT.gate_write_lock).await?;
    lambda::require_lambda(&mut *tx, &params.lambda).await?;
    let released = match params.state {
        GateState::Open => {
            sqlx::query("DELETE FROM gates WHERE lambda = $1 AND collection = $2")
                .bind(&params.lambda)
                .bind(&collection)
                .execute(&mut *tx)
                .await?;
            sqlx::query(sql(format!(
                "UPDATE tasks SET held = FALSE, next_trigger_at = due_at \
                 WHERE held = TRUE AND lambda = $1 AND ($2 = '' OR collection = $2) \
                 AND status IN {UNFINISHED} \
                 AND id IN (SELECT t.id FROM tasks t WHERE t.held = TRUE AND t.lambda = $1 \
                 AND COALESCE({GATE_OF_TASK}, 0) = 0)"
            )))
            .bind(&params.lambda)
            .bind(&collection)
            .execute(&mut *tx)
            .await?
            .rows_affected()
        }
        state => {
            sqlx::query(
                "INSERT INTO gates (lambda, collection, state, updated_at) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (lambda, collection) \
                 DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at",
            )
            .bind(&params.lambda)
            .bind(&collection)
            .bind(state.as_str())
            .bind(params.now)
            .execute(&mut *tx)
            .await?;
            if state == GateState::Dropped {
                // Held tasks come due now, so the next poll drops them.
                sqlx::query(sql(format!(
                    "UPDATE tasks SET held = FALSE, next_trigger_at = $3 \
                     WHERE held = TRUE AND lambda = $1 AND ($2 = '' OR collection = $2) \
                     AND status IN {UNFINISHED}"
                )))
                .bind(&params.lambda)
                .bind(&collection)
                .bind(params.now)
                .execute(&mut *tx)
                .await?;
            }
            0
        }
    };
    Ok(released)
}

row! {
    /// A row of `gates`: a gate that is not open (an open one has no row).
    struct GateRow {
        lambda: String,
        collection: String,
        state: String,
        updated_at: crate::Millis,
    }
}

pub(super) async fn list(store: &Store) -> Result<Vec<Gate>> {
    let rows: Vec<GateRow> = sqlx::query_as(
        "SELECT lambda, collection, state, updated_at FROM gates ORDER BY lambda, collection",
    )
    .fetch_all(&store.pool)
    .await?;
    rows.into_iter()
        .map(|row| {
            let state = match row.state.as_str() {
                "paused" => GateState::Paused,
                "dropped" => GateState::Dropped,
                other => return Err(StoreError::Corrupt(format!("gate state {other:?}"))),
            };
            Ok(Gate {
                lambda: row.lambda,
                collection: (!row.collection.is_empty()).then_some(row.collection),
                state,
                updated_at: row.updated_at,
            })
        })
        .collect()
}
