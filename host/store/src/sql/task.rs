//! Tasks as clients see them: read, list, count, cancel, the backlog,
//! attempts, and the redrive of dead tasks; inserting them is `insert.rs`.

use waft_core::task::check_lambda_name;
use waft_core::{TaskStatus, machine};

use super::{Connection, DIALECT, Store};
use super::{insert, journal, lambda};
use crate::names::ENDED;
use crate::names::status::{CANCELLED, DEAD, FINAL, LIVE, NEW, One, UNFINISHED};
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
    let Some((statement, binds)) = list_statement(&params) else {
        return Ok(Vec::new());
    };
    let mut query = sqlx::query(sql(statement));
    for bind in binds {
        query = query.bind(bind);
    }
    let rows = query.fetch_all(&store.pool).await?;
    rows.iter().map(rows::task).collect()
}

/// The statement that lists tasks by `params`, with its parameters; `None`
/// when the list is empty whatever the store holds (a token of no lambda).
fn list_statement(params: &TaskList) -> Option<(String, Vec<String>)> {
    let limit = match params.limit {
        0 => 100,
        n => n.min(1000),
    };
    // Only the filters given enter the statement, so the planner can take
    // the index they fit — lambda and collection (`tasks_collection`),
    // lambda and key (`tasks_key`), parent (`tasks_parent`), a live status
    // (`tasks_live`, by lambda and status), an ended one (`tasks_ended` by
    // status, `tasks_lambda_ended` by lambda and status), or the ids alone,
    // most read in id order — instead of one statement testing every
    // filter on every row. Creation times bound the ids, which are ULIDs
    // and begin with them.
    let mut conditions = Vec::new();
    let mut binds: Vec<String> = Vec::new();
    // A token's lambdas, each a parameter (a token names few): in the
    // statement, so that the limit counts only theirs.
    if let Some(lambdas) = &params.lambdas {
        if lambdas.is_empty() {
            return None;
        }
        let mut names = Vec::with_capacity(lambdas.len());
        for lambda in lambdas {
            binds.push(text_in(lambda).into_owned());
            names.push(format!("${}", binds.len()));
        }
        conditions.push(format!("lambda IN ({})", names.join(", ")));
    }
    if let Some(status) = params.status {
        // The status itself, and the predicate of the index that holds it
        // (a state ended for good: the ended tasks', [`ENDED`]; any other:
        // `tasks_live`'s) as the index spells it: neither planner takes a
        // partial index a condition does not show it may.
        conditions.push(format!("status = {}", One::of(status)));
        if machine::FINAL.contains(status) {
            conditions.push(ENDED.to_owned());
        } else {
            conditions.push(format!("status IN {LIVE}"));
            // A live status of every lambda: `tasks_live` leads with the
            // lambda, so each lambda's entries of the status are found in
            // turn, instead of reading the whole index. Within them, the
            // ids follow what the overview and the backlog seek by: a page
            // sorts the status's entries (0.15 to 0.3 s for 900,000 tasks
            // of one lambda waiting), never a row or an ended task.
            if params.lambda.is_none() && params.lambdas.is_none() {
                conditions.push("lambda IN (SELECT name FROM lambdas)".to_owned());
            }
        }
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
    // The page's ids first, then their rows: an index that holds the ids
    // (`tasks_live` holds them last, after what the overview and the
    // backlog seek by) pages from its entries alone, and a sort reads no
    // row but the page's.
    let mut ids = "SELECT id FROM tasks".to_owned();
    if !conditions.is_empty() {
        ids.push_str(" WHERE ");
        ids.push_str(&conditions.join(" AND "));
    }
    let statement = format!(
        "SELECT {TASK_COLUMNS} FROM tasks WHERE id IN \
         ({ids} ORDER BY id {order} LIMIT {limit}) ORDER BY id {order}"
    );
    Some((statement, binds))
}

pub(super) async fn count(store: &Store, params: TaskCount) -> Result<Vec<StatusCount>> {
    check_lambda_name(&params.lambda)?;
    let (statement, binds) = count_statement(&params);
    let mut query = sqlx::query_as(sql(statement));
    for bind in binds {
        query = query.bind(bind);
    }
    let rows: Vec<(String, i64)> = query.fetch_all(&store.pool).await?;
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

/// The statement that counts a lambda's tasks by status, with its
/// parameters: the live tasks (from `tasks_live`) and those ended for good
/// (from `tasks_lambda_ended`, which holds the dead too: they are counted
/// with the live) apart, each from the index that holds its states; or,
/// when a filter is given, through that filter's index.
fn count_statement(params: &TaskCount) -> (String, Vec<String>) {
    let mut binds = vec![text_in(&params.lambda).into_owned()];
    let mut filters = String::new();
    for (column, value) in [
        ("collection", &params.collection),
        ("parent_id", &params.parent_id),
        ("key", &params.key),
    ] {
        if let Some(value) = value {
            binds.push(text_in(value).into_owned());
            filters.push_str(&format!(" AND {column} = ${}", binds.len()));
        }
    }
    if !filters.is_empty() {
        // A collection's, a parent's or a key's tasks: read through that
        // filter's own index, whatever their states. The halves' predicates
        // would have the planner read every live task of the lambda
        // instead (100 ms a count at 50,000 tasks, on Postgres).
        let statement = format!(
            "SELECT status, COUNT(*) AS n FROM tasks WHERE lambda = $1{filters} GROUP BY status"
        );
        return (statement, binds);
    }
    let half = |states: String| {
        format!(
            "SELECT status, COUNT(*) AS n FROM tasks WHERE lambda = $1 AND {states} \
             GROUP BY status"
        )
    };
    let live = half(format!("status IN {LIVE}"));
    let ended = half(format!("{ENDED} AND status IN {FINAL}"));
    (format!("{live} UNION ALL {ended}"), binds)
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
    let found = sqlx::query(sql(backlog_statement()))
        .bind(now)
        .fetch_all(&store.pool)
        .await?;
    let mut backlog = Vec::new();
    for row in &found {
        let mut oldest_due = None;
        for i in 0..machine::WAITING.iter().count() {
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

/// The backlog's statement: for each lambda and priority, the oldest due
/// of each waiting state (`oldest0`, `oldest1`, ...), each found by a seek
/// into `tasks_live` (its lambda, status, priority and flags lead it).
fn backlog_statement() -> String {
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
    format!(
        "WITH RECURSIVE levels(lambda, priority) AS ( \
            SELECT lambda, MAX(priorities) - 1 FROM lambda_versions GROUP BY lambda \
            UNION ALL SELECT lambda, priority - 1 FROM levels WHERE priority > 0) \
         SELECT l.lambda, l.priority, {} FROM levels l ORDER BY l.lambda, l.priority",
        oldest.join(", ")
    )
}

/// A task's attempts, in order: its rows of `attempts`, and the execution
/// its own row holds when that one ended it for good (see `attempt.rs`).
pub(super) async fn attempts(store: &Store, task_id: &str) -> Result<Vec<Attempt>> {
    let rows = sqlx::query(sql(format!(
        "SELECT attempt, lease_token, outcome, error, log, started_at, ended_at, replayed \
         FROM attempts WHERE task_id = $1 \
         UNION ALL SELECT attempt, lease_token, outcome, error, log, started_at, ended_at, \
            replayed FROM ({}) f \
         ORDER BY lease_token",
        super::attempt::final_attempts("t.id = $1")
    )))
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
                "{} WHERE status = {DEAD} AND status IN {LIVE} AND lambda = $1 \
                 AND ($3 IS NULL OR collection = $3) \
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

/// The plans of the statements that list and count tasks, and of the
/// overview and the backlog, on this backend: each reads `tasks` through the
/// index that holds what it filters by, never the whole table.
#[cfg(test)]
mod plans {
    use waft_core::TaskStatus::{Enqueued, New, Success};

    use super::super::stats;
    use super::{backlog_statement, count_statement, list_statement};
    use crate::{TaskCount, TaskList};

    /// A statement and its text parameters.
    type Statement = (String, Vec<String>);

    /// Whether a plan reads the whole of `tasks` (aliased `t` or not).
    fn scans_the_table(plan: &str) -> bool {
        plan.lines().any(|step| {
            let step = step.trim();
            matches!(step, "SCAN tasks" | "SCAN t") || step.contains("Seq Scan on tasks")
        })
    }

    #[tokio::test]
    async fn lists_counts_and_the_overview_read_tasks_through_their_index() {
        let Some((store, _alive)) = super::super::super::plan_store().await else {
            return;
        };
        let list = |params: TaskList| list_statement(&params).expect("a statement");
        let count = |params: TaskCount| count_statement(&params);
        let bulk = || Some("bulk".to_owned());
        let hello = || Some("hello".to_owned());
        let cases: Vec<(&str, Statement, &[&str])> = vec![
            (
                "the overview",
                (stats::live_statement().replace("$1", "0"), vec![]),
                &["tasks_live"],
            ),
            (
                "the backlog",
                (backlog_statement().replace("$1", "0"), vec![]),
                &["tasks_live"],
            ),
            (
                "a lambda's tasks in a live state",
                list(TaskList {
                    lambda: bulk(),
                    status: Some(New),
                    newest_first: true,
                    ..TaskList::default()
                }),
                &["tasks_live"],
            ),
            (
                "every lambda's tasks in a live state",
                list(TaskList {
                    status: Some(Enqueued),
                    newest_first: true,
                    ..TaskList::default()
                }),
                &["tasks_live"],
            ),
            (
                "a lambda's tasks in an ended state",
                list(TaskList {
                    lambda: hello(),
                    status: Some(Success),
                    ..TaskList::default()
                }),
                &["tasks_lambda_ended"],
            ),
            (
                "every lambda's tasks in an ended state",
                list(TaskList {
                    status: Some(Success),
                    newest_first: true,
                    ..TaskList::default()
                }),
                &["tasks_ended"],
            ),
            (
                "a collection's tasks in a live state",
                list(TaskList {
                    lambda: bulk(),
                    collection: Some("c7".into()),
                    status: Some(New),
                    newest_first: true,
                    ..TaskList::default()
                }),
                &["tasks_collection"],
            ),
            (
                "a collection's tasks by state",
                count(TaskCount {
                    lambda: "bulk".into(),
                    collection: Some("c7".into()),
                    ..TaskCount::default()
                }),
                &["tasks_collection"],
            ),
            (
                "a lambda's tasks by state",
                count(TaskCount {
                    lambda: "bulk".into(),
                    ..TaskCount::default()
                }),
                &["tasks_live", "tasks_lambda_ended"],
            ),
        ];
        for (what, (statement, binds), indexes) in cases {
            let plan = super::super::super::plan(&store, &statement, &binds).await;
            eprintln!("{what}:\n{plan}\n");
            assert!(!scans_the_table(&plan), "{what} reads every task:\n{plan}");
            for index in indexes {
                assert!(
                    plan.contains(index),
                    "{what} does not read {index}:\n{plan}"
                );
            }
            if what == "the overview" {
                assert!(!plan.contains("TEMP B-TREE"), "{what} sorts:\n{plan}");
            }
        }
    }
}
