//! Tasks as clients see them: insert (validated, idempotent, with
//! continuations and parents), read, list, cancel, the backlog, attempts,
//! and the redrive of dead tasks.

use std::collections::HashMap;

use waft_core::TaskStatus;
use waft_core::task::{check_collection_name, check_lambda_name};

use super::lambda;
use super::{Connection, DIALECT, Store};
use crate::names::status::{CANCELLED, DEAD, NEW, UNFINISHED, WAITING};
use crate::rows::{self, RowExt, TASK_COLUMNS};
use crate::rules::{Admitted, Origin, admit};
use crate::support::{least_task_id, sql, task_id, text_in};
use crate::{
    Attempt, Backlog, DeadRedrive, DeadSelector, Lambda, Millis, NewTask, Result, StatusCount,
    StoreError, Task, TaskCount, TaskInsertMany, TaskInserted, TaskList,
};

/// Checks tasks against their lambdas and inserts them in one
/// statement; `cron_id` links tasks made by a periodic schedule.
pub(super) async fn insert(
    conn: &mut Connection,
    tasks: Vec<NewTask>,
    cron_id: Option<&str>,
    origin: Origin,
    now: Millis,
) -> Result<Vec<TaskInserted>> {
    let mut lambdas: HashMap<String, Lambda> = HashMap::new();
    let mut keys: HashMap<(String, String), String> = HashMap::new();
    let mut answers = Vec::with_capacity(tasks.len());
    let mut rows = Vec::with_capacity(tasks.len());
    for task in tasks {
        check_lambda_name(&task.lambda)?;
        let lambda = lambda::cached_lambda(conn, &mut lambdas, &task.lambda).await?;
        let config = &lambda.config;
        let Admitted {
            collection,
            priority,
            run_at,
        } = admit(&task, &lambda, origin, now)?;
        // A pinned task's attempt budget is its version's, as a
        // redrive's is; its backoff is read from that version too.
        let max_attempts = match task.version {
            Some(version) => pinned_attempts(conn, &task.lambda, version).await?,
            None => i64::from(config.max_attempts),
        };
        if let Some(key) = &task.idempotency_key {
            let slot = (task.lambda.clone(), key.clone());
            if let Some(id) = keys.get(&slot) {
                answers.push(TaskInserted {
                    id: id.clone(),
                    created: false,
                });
                continue;
            }
            let existing: Option<String> = sqlx::query_scalar(
                "SELECT id FROM tasks WHERE lambda = $1 AND idempotency_key = $2",
            )
            .bind(&task.lambda)
            .bind(text_in(key))
            .fetch_optional(&mut *conn)
            .await?;
            if let Some(id) = existing {
                answers.push(TaskInserted { id, created: false });
                continue;
            }
        }
        if let Some(parent) = &task.parent_id {
            let row = sqlx::query("SELECT lambda, status, lease_token FROM tasks WHERE id = $1")
                .bind(text_in(parent))
                .fetch_optional(&mut *conn)
                .await?
                .ok_or_else(|| StoreError::Invalid(format!("unknown parent task {parent}")))?;
            if let Some(lease) = task.parent_lease {
                let running = matches!(
                    rows::status(&row)?,
                    TaskStatus::Claimed | TaskStatus::Processing
                );
                if !running || row.int("lease_token")? != lease {
                    return Err(StoreError::ParentLeaseLost {
                        parent: parent.clone(),
                        lease,
                    });
                }
                // An execution schedules children of its own lambda,
                // and of those its lambda's current version names.
                let parent_lambda = row.text("lambda")?;
                if parent_lambda != task.lambda
                    && !lambda::cached_lambda(conn, &mut lambdas, &parent_lambda)
                        .await?
                        .config
                        .allows_child(&parent_lambda, &task.lambda)
                {
                    return Err(StoreError::ChildNotAllowed {
                        parent_lambda,
                        child_lambda: task.lambda.clone(),
                    });
                }
            }
        } else if task.parent_lease.is_some() {
            return Err(StoreError::Invalid(
                "a parent lease needs a parent task".into(),
            ));
        }
        let continuation = match &task.continuation {
            None => None,
            Some(then) => {
                check_lambda_name(&then.lambda)?;
                if let Some(collection) = &then.collection {
                    check_collection_name(collection)?;
                }
                let next = lambda::require_lambda(conn, &then.lambda).await?;
                if let Some(priority) = then.priority
                    && priority >= next.config.priorities
                {
                    return Err(StoreError::InvalidPriority {
                        lambda: next.name,
                        priority,
                        max: next.config.priorities - 1,
                    });
                }
                Some(serde_json::to_string(then).map_err(|e| StoreError::Invalid(e.to_string()))?)
            }
        };
        let id = task_id(now);
        if let Some(key) = &task.idempotency_key {
            keys.insert((task.lambda.clone(), key.clone()), id.clone());
        }
        rows.push(serde_json::json!({
            "id": id,
            "lambda": task.lambda,
            "collection": collection,
            "priority": priority,
            "payload": hex::encode(&task.payload),
            "max_attempts": max_attempts,
            "run_at": run_at,
            "parent_id": task.parent_id,
            "key": task.idempotency_key.as_deref().map(text_in),
            "version": task.version,
            "continuation": continuation,
        }));
        answers.push(TaskInserted { id, created: true });
    }
    if !rows.is_empty() {
        // A task with the same idempotency key committed by another
        // transaction since the lookup above is skipped here (no
        // error) and answered with that task below.
        let created: Vec<String> = sqlx::query_scalar(sql(format!(
            "INSERT INTO tasks (id, lambda, collection, priority, payload, status, \
             max_attempts, scheduled_at, due_at, next_trigger_at, created_at, parent_id, \
             idempotency_key, cron_id, version, continuation) \
             SELECT j.value->>'id', j.value->>'lambda', j.value->>'collection', \
             CAST(j.value->>'priority' AS BIGINT), {payload}, {NEW}, \
             CAST(j.value->>'max_attempts' AS BIGINT), CAST(j.value->>'run_at' AS BIGINT), \
             CAST(j.value->>'run_at' AS BIGINT), CAST(j.value->>'run_at' AS BIGINT), $2, \
             j.value->>'parent_id', j.value->>'key', $3, CAST(j.value->>'version' AS BIGINT), \
             j.value->>'continuation' FROM {rows} WHERE TRUE \
             ON CONFLICT (lambda, idempotency_key) WHERE idempotency_key IS NOT NULL \
             DO NOTHING RETURNING id",
            payload = DIALECT.unhex("j.value->>'payload'"),
            rows = DIALECT.json_rows,
        )))
        .bind(serde_json::Value::Array(rows).to_string())
        .bind(now)
        .bind(cron_id)
        .fetch_all(&mut *conn)
        .await?;
        if created.len() != answers.iter().filter(|a| a.created).count() {
            let created: std::collections::HashSet<String> = created.into_iter().collect();
            for ((lambda, key), id) in &keys {
                if created.contains(id) {
                    continue;
                }
                let winner: String = sqlx::query_scalar(
                    "SELECT id FROM tasks WHERE lambda = $1 AND idempotency_key = $2",
                )
                .bind(lambda)
                .bind(text_in(key))
                .fetch_one(&mut *conn)
                .await?;
                for answer in answers.iter_mut().filter(|a| &a.id == id) {
                    *answer = TaskInserted {
                        id: winner.clone(),
                        created: false,
                    };
                }
            }
        }
    }
    Ok(answers)
}

/// The attempt budget of `version` of `lambda`; `UnknownVersion` when the
/// lambda has no such version.
async fn pinned_attempts(conn: &mut Connection, lambda: &str, version: u32) -> Result<i64> {
    sqlx::query_scalar(
        "SELECT max_attempts FROM lambda_versions WHERE lambda = $1 AND version = $2",
    )
    .bind(lambda)
    .bind(i64::from(version))
    .fetch_optional(&mut *conn)
    .await?
    .ok_or_else(|| StoreError::UnknownVersion {
        lambda: lambda.to_owned(),
        version,
    })
}

pub(super) async fn insert_many(
    tx: &mut Connection,
    params: TaskInsertMany,
) -> Result<Vec<TaskInserted>> {
    let inserted = insert(&mut *tx, params.tasks, None, Origin::Client, params.now).await?;
    Ok(inserted)
}

pub(super) async fn get(store: &Store, id: &str) -> Result<Option<Task>> {
    let row = sqlx::query(sql(format!(
        "SELECT {TASK_COLUMNS} FROM tasks WHERE id = $1"
    )))
    .bind(text_in(id))
    .fetch_optional(&store.pool)
    .await?;
    row.as_ref().map(rows::task).transpose()
}

pub(super) async fn list(store: &Store, params: TaskList) -> Result<Vec<Task>> {
    let limit = match params.limit {
        0 => 100,
        n => n.min(1000),
    };
    // Only the filters given enter the statement, so the planner can take
    // the index they fit — lambda and status (`tasks_lambda_status`),
    // lambda and collection (`tasks_collection`), status (`tasks_status`),
    // parent (`tasks_parent`), or the ids alone, most read in id order —
    // instead of one statement testing every filter on every row. Creation
    // times bound the ids, which are ULIDs and begin with them.
    let mut conditions = Vec::new();
    let mut binds: Vec<String> = Vec::new();
    // A token's lambdas, each a parameter (a token names few): in the
    // statement, so that the limit counts only theirs.
    if let Some(lambdas) = &params.lambdas {
        if lambdas.is_empty() {
            return Ok(Vec::new());
        }
        let mut names = Vec::with_capacity(lambdas.len());
        for lambda in lambdas {
            binds.push(text_in(lambda).into_owned());
            names.push(format!("${}", binds.len()));
        }
        conditions.push(format!("lambda IN ({})", names.join(", ")));
    }
    let mut filter = |column: &str, operator: &str, value: String| {
        binds.push(value);
        conditions.push(format!("{column} {operator} ${}", binds.len()));
    };
    if let Some(lambda) = &params.lambda {
        filter("lambda", "=", text_in(lambda).into_owned());
    }
    if let Some(collection) = &params.collection {
        filter("collection", "=", text_in(collection).into_owned());
    }
    if let Some(status) = params.status {
        filter("status", "=", status.as_str().to_owned());
    }
    if let Some(parent) = &params.parent_id {
        filter("parent_id", "=", text_in(parent).into_owned());
    }
    if let Some(from) = params.created_from {
        filter("id", ">=", least_task_id(from));
    }
    if let Some(before) = params.created_before {
        filter("id", "<", least_task_id(before));
    }
    let (past, order) = if params.newest_first {
        ("<", "DESC")
    } else {
        (">", "ASC")
    };
    if let Some(after) = &params.after {
        filter("id", past, text_in(after).into_owned());
    }
    let mut statement = format!("SELECT {TASK_COLUMNS} FROM tasks");
    if !conditions.is_empty() {
        statement.push_str(" WHERE ");
        statement.push_str(&conditions.join(" AND "));
    }
    statement.push_str(&format!(" ORDER BY id {order} LIMIT {limit}"));
    let mut query = sqlx::query(sql(statement));
    for bind in binds {
        query = query.bind(bind);
    }
    let rows = query.fetch_all(&store.pool).await?;
    rows.iter().map(rows::task).collect()
}

pub(super) async fn count(store: &Store, params: TaskCount) -> Result<Vec<StatusCount>> {
    check_lambda_name(&params.lambda)?;
    let rows = sqlx::query(
        "SELECT status, COUNT(*) AS n FROM tasks WHERE lambda = $1 \
         AND ($2 IS NULL OR collection = $2) AND ($3 IS NULL OR parent_id = $3) \
         GROUP BY status",
    )
    .bind(text_in(&params.lambda))
    .bind(params.collection.as_deref().map(text_in))
    .bind(params.parent_id.as_deref().map(text_in))
    .fetch_all(&store.pool)
    .await?;
    let mut counts = rows
        .iter()
        .map(|row| {
            Ok(StatusCount {
                status: rows::status(row)?,
                count: u64::try_from(row.int("n")?)
                    .map_err(|_| StoreError::Corrupt("a negative count".into()))?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    counts.sort_by_key(|c| c.status);
    Ok(counts)
}

pub(super) async fn cancel(tx: &mut Connection, id: &str, now: Millis) -> Result<Task> {
    // Locked, and the update guarded too: a result committing
    // meanwhile either ends the task first (and the cancel is
    // refused) or waits, and is then refused itself.
    let row = sqlx::query(sql(format!(
        "SELECT status FROM tasks WHERE id = $1 {}",
        DIALECT.row_lock
    )))
    .bind(text_in(id))
    .fetch_optional(&mut *tx)
    .await?
    .ok_or_else(|| StoreError::TaskNotFound(id.to_owned()))?;
    let status = rows::status(&row)?;
    if status.is_terminal() {
        return Err(StoreError::AlreadyEnded {
            id: id.to_owned(),
            status,
        });
    }
    let row = sqlx::query(sql(format!(
        "UPDATE tasks SET status = {CANCELLED}, next_trigger_at = NULL, held = FALSE, \
         finished_at = $2 WHERE id = $1 AND status IN {UNFINISHED} RETURNING {TASK_COLUMNS}"
    )))
    .bind(text_in(id))
    .bind(now)
    .fetch_optional(&mut *tx)
    .await?
    .ok_or_else(|| StoreError::Corrupt(format!("task {id} ended under a row lock")))?;
    let task = rows::task(&row)?;
    Ok(task)
}

pub(super) async fn backlog(store: &Store, now: Millis) -> Result<Vec<Backlog>> {
    let rows = sqlx::query(sql(format!(
        "SELECT lambda, priority, MIN(due_at) AS oldest FROM tasks \
         WHERE status IN {WAITING} AND held = FALSE \
         AND due_at <= $1 GROUP BY lambda, priority ORDER BY lambda, priority"
    )))
    .bind(now)
    .fetch_all(&store.pool)
    .await?;
    rows.iter()
        .map(|row| {
            Ok(Backlog {
                lambda: row.text("lambda")?,
                priority: u8::try_from(row.int("priority")?)
                    .map_err(|_| StoreError::Corrupt("priority".into()))?,
                oldest_due: row.int("oldest")?,
            })
        })
        .collect()
}

pub(super) async fn attempts(store: &Store, task_id: &str) -> Result<Vec<Attempt>> {
    let rows = sqlx::query(
        "SELECT attempt, lease_token, outcome, error, log, started_at, ended_at \
         FROM attempts WHERE task_id = $1 ORDER BY lease_token",
    )
    .bind(text_in(task_id))
    .fetch_all(&store.pool)
    .await?;
    rows.iter().map(rows::attempt).collect()
}

pub(super) async fn redrive(tx: &mut Connection, params: DeadRedrive) -> Result<u64> {
    // The version to pin (`$3` here; NULL for the current one)
    // also sets the fresh attempt budget.
    let redrive = |v: &str| {
        format!(
            "UPDATE tasks SET status = {NEW}, attempt = 0, \
             max_attempts = (SELECT v.max_attempts FROM lambda_versions v \
                WHERE v.lambda = tasks.lambda AND v.version = COALESCE(CAST({v} AS BIGINT), \
                (SELECT current_version FROM lambdas WHERE name = tasks.lambda))), \
             due_at = $2, next_trigger_at = $2, finished_at = NULL, \
             version = CAST({v} AS BIGINT)"
        )
    };
    let version = params.version.map(i64::from);
    let count = match params.selector {
        DeadSelector::Ids(ids) => {
            for id in &ids {
                let row = sqlx::query("SELECT status, lambda FROM tasks WHERE id = $1")
                    .bind(text_in(id))
                    .fetch_optional(&mut *tx)
                    .await?
                    .ok_or_else(|| StoreError::TaskNotFound(id.clone()))?;
                let status = rows::status(&row)?;
                if status != TaskStatus::Dead {
                    return Err(StoreError::NotDead {
                        id: id.clone(),
                        status,
                    });
                }
                if let Some(pin) = params.version {
                    lambda::require_version(&mut *tx, &row.text("lambda")?, pin).await?;
                }
                sqlx::query(sql(format!("{} WHERE id = $1", redrive("$3"))))
                    .bind(id)
                    .bind(params.now)
                    .bind(version)
                    .execute(&mut *tx)
                    .await?;
            }
            ids.len() as u64
        }
        DeadSelector::Filter { lambda, collection } => {
            lambda::require_lambda(&mut *tx, &lambda).await?;
            if let Some(pin) = params.version {
                lambda::require_version(&mut *tx, &lambda, pin).await?;
            }
            sqlx::query(sql(format!(
                "{} WHERE status = {DEAD} AND lambda = $1 AND ($3 IS NULL OR collection = $3)",
                redrive("$4")
            )))
            .bind(&lambda)
            .bind(params.now)
            .bind(collection)
            .bind(version)
            .execute(&mut *tx)
            .await?
            .rows_affected()
        }
    };
    Ok(count)
}
