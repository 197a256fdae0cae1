//! Tasks as clients see them: read, list, count, cancel, the backlog,
//! attempts, and the redrive of dead tasks; inserting them is `insert.rs`.

use waft_core::task::check_lambda_name;
use waft_core::{TaskStatus, machine};

use super::{Connection, DIALECT, Store};
use super::{insert, journal, lambda};
use crate::names::status::{CANCELLED, DEAD, LIVE, NEW, One, UNFINISHED};
use crate::rows::{self, RowExt, TASK_COLUMNS};
use crate::rules::Origin;
use crate::support::{least_task_id, sql, text_in};
use crate::{
    Attempt, Backlog, DeadRedrive, DeadSelector, Millis, Result, StatusCount, StoreError, Task,
    TaskCount, TaskInsertMany, TaskInserted, TaskList,
};

pub(super) async fn insert_many(
    tx: &mut Connection,
    params: TaskInsertMany,
) -> Result<Vec<TaskInserted>> {
    let inserted = insert::insert(&mut *tx, params.tasks, None, Origin::Client, params.now).await?;
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
    // lambda and collection (`tasks_collection`), lambda and key
    // (`tasks_key`), status (`tasks_status`),
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
    if let Some(key) = &params.key {
        filter("key", "=", text_in(key).into_owned());
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
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT status, COUNT(*) AS n FROM tasks WHERE lambda = $1 \
         AND ($2 IS NULL OR collection = $2) AND ($3 IS NULL OR parent_id = $3) \
         AND ($4 IS NULL OR key = $4) GROUP BY status",
    )
    .bind(text_in(&params.lambda))
    .bind(params.collection.as_deref().map(text_in))
    .bind(params.parent_id.as_deref().map(text_in))
    .bind(params.key.as_deref().map(text_in))
    .fetch_all(&store.pool)
    .await?;
    let mut counts = rows
        .into_iter()
        .map(|(status, n)| {
            Ok(StatusCount {
                status: rows::task_status(status)?,
                count: u64::try_from(n)
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
    let status: String = sqlx::query_scalar(sql(format!(
        "SELECT status FROM tasks WHERE id = $1 {}",
        DIALECT.row_lock
    )))
    .bind(text_in(id))
    .fetch_optional(&mut *tx)
    .await?
    .ok_or_else(|| StoreError::TaskNotFound(id.to_owned()))?;
    let status = rows::task_status(status)?;
    if status.is_terminal() {
        return Err(StoreError::AlreadyEnded {
            id: id.to_owned(),
            status,
        });
    }
    let row = sqlx::query(sql(format!(
        "UPDATE tasks SET status = {CANCELLED}, next_trigger_at = NULL, held = FALSE, \
         parked = FALSE, awaits_turn = FALSE, finished_at = $2 WHERE id = $1 AND status IN {UNFINISHED} RETURNING {TASK_COLUMNS}"
    )))
    .bind(text_in(id))
    .bind(now)
    .fetch_optional(&mut *tx)
    .await?
    .ok_or_else(|| StoreError::Corrupt(format!("task {id} ended under a row lock")))?;
    let task = rows::task(&row)?;
    let child = super::poll::child_of(&task.id, task.parent_id.clone());
    super::fan_in::ended(&mut *tx, child, now).await?;
    Ok(task)
}

/// The oldest ready task of each lambda and priority: for each, and each
/// waiting state, the first entry of the index of live tasks past the
/// flags that hold a task back (all false), so a backlog of parked, held
/// or paced tasks costs nothing (grouping the index would read it whole,
/// a second at a million parked tasks). The priorities are every version's.
pub(super) async fn backlog(store: &Store, now: Millis) -> Result<Vec<Backlog>> {
    let oldest: Vec<String> = machine::WAITING
        .iter()
        .enumerate()
        .map(|(i, status)| {
            format!(
                "(SELECT MIN(t.due_at) FROM tasks t WHERE t.lambda = l.lambda \
                 AND t.priority = l.priority AND t.status = {} AND t.status IN {LIVE} \
                 AND t.held = FALSE AND t.parked = FALSE AND t.paced = FALSE \
                 AND t.key_paced = FALSE AND t.due_at <= $1) AS oldest{i}",
                One::of(status)
            )
        })
        .collect();
    let found = sqlx::query(sql(format!(
        "WITH RECURSIVE levels(lambda, priority) AS ( \
            SELECT lambda, MAX(priorities) - 1 FROM lambda_versions GROUP BY lambda \
            UNION ALL SELECT lambda, priority - 1 FROM levels WHERE priority > 0) \
         SELECT l.lambda, l.priority, {} FROM levels l ORDER BY l.lambda, l.priority",
        oldest.join(", ")
    )))
    .bind(now)
    .fetch_all(&store.pool)
    .await?;
    let mut backlog = Vec::new();
    for row in &found {
        let mut oldest_due = None;
        for i in 0..oldest.len() {
            if let Some(due) = row.opt_int(&format!("oldest{i}"))? {
                oldest_due = Some(oldest_due.map_or(due, |o: Millis| o.min(due)));
            }
        }
        let Some(oldest_due) = oldest_due else {
            continue;
        };
        let priority = row.int("priority")?;
        backlog.push(Backlog {
            lambda: row.text("lambda")?,
            priority: u8::try_from(priority).map_err(|_| StoreError::Corrupt("priority".into()))?,
            oldest_due,
        });
    }
    Ok(backlog)
}

pub(super) async fn attempts(store: &Store, task_id: &str) -> Result<Vec<Attempt>> {
    let rows = sqlx::query(
        "SELECT attempt, lease_token, outcome, error, log, started_at, ended_at, replayed \
         FROM attempts WHERE task_id = $1 ORDER BY lease_token",
    )
    .bind(text_in(task_id))
    .fetch_all(&store.pool)
    .await?;
    rows.iter().map(rows::attempt).collect()
}

/// The lambda of dead task `id`, whose row stays locked (on Postgres)
/// until the transaction ends, so that a redrive and a purge of it happen
/// one after the other; an error if it is missing or not dead.
pub(super) async fn require_dead(conn: &mut Connection, id: &str) -> Result<String> {
    let (status, lambda): (String, String) = sqlx::query_as(sql(format!(
        "SELECT status, lambda FROM tasks WHERE id = $1 {}",
        DIALECT.row_lock
    )))
    .bind(text_in(id))
    .fetch_optional(&mut *conn)
    .await?
    .ok_or_else(|| StoreError::TaskNotFound(id.to_owned()))?;
    match rows::task_status(status)? {
        TaskStatus::Dead => Ok(lambda),
        status => Err(StoreError::NotDead {
            id: id.to_owned(),
            status,
        }),
    }
}

/// Redrives dead tasks with a fresh attempt budget. A task keeps its
/// journal, and so the version that wrote it (its budget too), unless the
/// redrive pins a version or asks for a fresh start: then the journal is
/// discarded and the task runs as if it had never run, in a new journal
/// generation (`journal_generation`), so the children it schedules are new
/// ones, not those of its earlier runs.
pub(super) async fn redrive(tx: &mut Connection, params: DeadRedrive) -> Result<u64> {
    let discard = params.fresh || params.version.is_some();
    let version = params.version.map(i64::from);
    let redriven = match params.selector {
        DeadSelector::Ids(ids) => {
            for id in &ids {
                let lambda = require_dead(&mut *tx, id).await?;
                if let Some(pin) = params.version {
                    lambda::require_version(&mut *tx, &lambda, pin).await?;
                }
                sqlx::query(sql(format!(
                    "{} WHERE id = $1",
                    redrive_statement("$3", discard)
                )))
                .bind(id)
                .bind(params.now)
                .bind(version)
                .execute(&mut *tx)
                .await?;
            }
            ids.iter().map(|id| text_in(id).into_owned()).collect()
        }
        DeadSelector::Filter { lambda, collection } => {
            lambda::require_lambda(&mut *tx, &lambda).await?;
            if let Some(pin) = params.version {
                lambda::require_version(&mut *tx, &lambda, pin).await?;
            }
            sqlx::query_scalar(sql(format!(
                "{} WHERE status = {DEAD} AND lambda = $1 AND ($3 IS NULL OR collection = $3) \
                 RETURNING id",
                redrive_statement("$4", discard)
            )))
            .bind(&lambda)
            .bind(params.now)
            .bind(collection)
            .bind(version)
            .fetch_all(&mut *tx)
            .await?
        }
    };
    if discard {
        journal::discard(&mut *tx, &redriven).await?;
    }
    Ok(redriven.len() as u64)
}

/// The update that redrives a dead task, pinned to the version in
/// parameter `v` (NULL: none). Its budget is that version's, else its
/// journal's when it keeps one, else the current version's.
fn redrive_statement(v: &str, discard: bool) -> String {
    let (journal, kept) = if discard {
        (
            "journal_len = 0, journal_version = NULL, \
             journal_generation = journal_generation + 1, ",
            "NULL",
        )
    } else {
        ("", "tasks.journal_version")
    };
    format!(
        "UPDATE tasks SET status = {NEW}, attempt = 0, {journal}\
         max_attempts = (SELECT v.max_attempts FROM lambda_versions v \
            WHERE v.lambda = tasks.lambda AND v.version = COALESCE(CAST({v} AS BIGINT), {kept}, \
            (SELECT current_version FROM lambdas WHERE name = tasks.lambda))), \
         due_at = $2, next_trigger_at = $2, finished_at = NULL, \
         version = CAST({v} AS BIGINT)"
    )
}
