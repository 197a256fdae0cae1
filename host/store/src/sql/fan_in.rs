//! Fan-in: a task suspended until children it scheduled have ended (see
//! `waft_core::model::ChildrenState`).
//!
//! A child's end is read from its row, or, once the child was deleted
//! while its parent lived (its lambda deleted, a dead letter purged), from
//! the end it left in `child_ends` (`child_ends.rs`).
//!
//! A suspension waiting for children writes, in `awaits`, those of them
//! that have not ended ([`await_children`]); a child's end deletes its row,
//! and the end that deletes the last wakes the task ([`ended`]). So a
//! child's end costs its parent one row, however many siblings it has.
//!
//! Neither misses the other on Postgres (READ COMMITTED). The suspension
//! holds the task's row (its update) and then locks the awaited children's
//! rows before it reads which are live: a child ending meanwhile holds its
//! own row until it commits, so the suspension waits for it and then reads
//! it ended. A child ending looks for its parent suspended waiting for
//! children, locking that row: a suspension not yet committed is not seen
//! (and will see the child ended, as above); one committed is, and the
//! child's row is then in `awaits`. SQLite has one writer: nothing races.
//!
//! A batch of results locks the waiting parents of the children it ended
//! last, once, in id order, after every row of its own. Two transactions
//! can still wait on each other in Postgres — a cancel (the child, then its
//! parent) beside a batch that ended a sibling (the parent) and then
//! writes that child; two suspensions each ending the other's child — and
//! Postgres then fails one of them: an executor sends its results again, a
//! client retries its call. Rare, and never a lost or doubled change.

use super::{Connection, DIALECT, Store};
use crate::names::status::{SUSPENDED, UNFINISHED};
use crate::rows;
use crate::support::{batch_json, sql, text_in, text_out};
use crate::{ChildEnd, ChildrenState, Millis, Refusal, Result, StoreError, TaskChildrenRead};
use waft_core::limits::{MAX_AWAITED, MAX_JOURNAL_ANSWER};

/// A child's id, status, output and last error.
type EndRow = (String, String, Option<Vec<u8>>, Option<String>);

/// A task id as the statements below read a list of them.
#[derive(serde::Serialize)]
struct Id<'a> {
    id: std::borrow::Cow<'a, str>,
}

fn ids_json<'a>(ids: impl IntoIterator<Item = &'a str>) -> Result<String> {
    let ids: Vec<Id<'a>> = ids.into_iter().map(|id| Id { id: text_in(id) }).collect();
    batch_json(&ids)
}

/// How the children `params.children` of the execution's task stand, for
/// the execution holding its lease. An id that is not a child of the task
/// is refused as invalid, and so are ended children whose outputs together
/// are more than one journal entry holds.
pub(super) async fn read(
    store: &Store,
    params: TaskChildrenRead,
) -> Result<Result<ChildrenState, Refusal>> {
    if let Err(refusal) = super::signal::fence(store, &params.id, params.lease_token).await? {
        return Ok(Err(refusal));
    }
    if params.children.len() > MAX_AWAITED {
        return Err(StoreError::Invalid(format!(
            "a wait for {} children is over the {MAX_AWAITED} one wait may list",
            params.children.len()
        )));
    }
    if params.children.is_empty() {
        return Ok(Ok(ChildrenState::Ended(Vec::new())));
    }
    let json = ids_json(params.children.iter().map(String::as_str))?;
    let found: Vec<(String, String, Option<String>, Option<i64>)> = sqlx::query_as(sql(format!(
        "SELECT t.id, t.status, t.parent_id, \
         CAST(COALESCE(OCTET_LENGTH(t.output), 0) + COALESCE(OCTET_LENGTH(t.last_error), 0) AS BIGINT) \
         FROM {rows} \
         JOIN tasks t ON t.id = j.value->>'id' \
         UNION ALL SELECT e.child_id, e.status, e.parent_id, \
         CAST(COALESCE(OCTET_LENGTH(e.output), 0) + COALESCE(OCTET_LENGTH(e.last_error), 0) AS BIGINT) \
         FROM {rows} \
         JOIN child_ends e ON e.child_id = j.value->>'id'",
        rows = DIALECT.json_rows
    )))
    .bind(&json)
    .fetch_all(&store.pool)
    .await?;
    let own = text_in(&params.id);
    let mut live = 0u32;
    let mut bytes = 0usize;
    let mut seen = std::collections::HashSet::with_capacity(found.len());
    for (id, status, parent, size) in &found {
        if parent.as_deref() != Some(&*own) {
            return Err(not_a_child(id, &params.id));
        }
        // What the answer holds of each id listed, a repeated one again.
        let size = usize::try_from(size.unwrap_or(0)).unwrap_or(usize::MAX);
        bytes = bytes.saturating_add(size).saturating_add(id.len());
        if !seen.insert(id.as_str()) {
            continue;
        }
        if waft_core::machine::UNFINISHED.contains(rows::task_status(status.clone())?) {
            live += 1;
        }
    }
    if let Some(missing) = params
        .children
        .iter()
        .find(|id| !seen.contains(&*text_in(id)))
    {
        return Err(not_a_child(missing, &params.id));
    }
    if live > 0 {
        return Ok(Ok(ChildrenState::Waiting { live }));
    }
    // With what framing each end adds.
    let framing = found.len() * 128;
    if bytes.saturating_add(framing) > MAX_JOURNAL_ANSWER {
        return Err(StoreError::Invalid(format!(
            "the ends of these {} children (outputs and errors) are {bytes} bytes together, more \
             than one wait may return ({MAX_JOURNAL_ANSWER} bytes): wait for fewer at once",
            found.len()
        )));
    }
    let rows: Vec<EndRow> = sqlx::query_as(sql(format!(
        "SELECT t.id, t.status, t.output, t.last_error FROM {rows} \
         JOIN tasks t ON t.id = j.value->>'id' \
         UNION ALL SELECT e.child_id, e.status, e.output, e.last_error FROM {rows} \
         JOIN child_ends e ON e.child_id = j.value->>'id'",
        rows = DIALECT.json_rows
    )))
    .bind(&json)
    .fetch_all(&store.pool)
    .await?;
    let mut by_id = std::collections::HashMap::with_capacity(rows.len());
    for (id, status, output, error) in rows {
        let status = rows::task_status(status)?;
        if !waft_core::machine::ENDED.contains(status) {
            // Redriven since the first look: live again.
            return Ok(Ok(ChildrenState::Waiting { live: 1 }));
        }
        by_id.insert(id, (status, output, error.map(text_out)));
    }
    let ends = params
        .children
        .iter()
        .map(|id| {
            let (status, output, error) = by_id
                .get(&*text_in(id))
                .cloned()
                .ok_or_else(|| not_a_child(id, &params.id))?;
            Ok(ChildEnd {
                id: id.clone(),
                status,
                output,
                error,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Ok(ChildrenState::Ended(ends)))
}

fn not_a_child(id: &str, task: &str) -> StoreError {
    StoreError::Invalid(format!("task {id:?} is not a child of task {task}"))
}

/// After task `id` was suspended waiting for its children `children`:
/// keeps those not ended in `awaits`, and wakes the task at once when none
/// is left (they ended while the execution ran).
pub(super) async fn await_children(
    tx: &mut Connection,
    id: &str,
    children: &[String],
    now: Millis,
) -> Result<()> {
    let json = ids_json(children.iter().map(String::as_str))?;
    // Waits for any child ending now to commit (see the module's doc).
    sqlx::query(sql(format!(
        "SELECT t.id FROM {} JOIN tasks t ON t.id = j.value->>'id' \
         WHERE t.parent_id = $2 ORDER BY t.id {}",
        DIALECT.json_rows, DIALECT.share_lock
    )))
    .bind(&json)
    .bind(text_in(id))
    .execute(&mut *tx)
    .await?;
    sqlx::query("DELETE FROM awaits WHERE task_id = $1")
        .bind(text_in(id))
        .execute(&mut *tx)
        .await?;
    let kept = sqlx::query(sql(format!(
        "INSERT INTO awaits (task_id, child_id) \
         SELECT DISTINCT $2, t.id FROM {} JOIN tasks t ON t.id = j.value->>'id' \
         WHERE t.parent_id = $2 AND t.status IN {UNFINISHED}",
        DIALECT.json_rows
    )))
    .bind(&json)
    .bind(text_in(id))
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if kept == 0 {
        super::signal::wake(tx, id, now).await?;
    }
    Ok(())
}

/// After tasks ended in this transaction (`(task, parent)` for those with
/// a parent): each parent suspended waiting for its children forgets them,
/// and is woken by the end of the last it waited for.
pub(super) async fn ended(
    tx: &mut Connection,
    mut children: Vec<(String, String)>,
    now: Millis,
) -> Result<()> {
    if children.is_empty() {
        return Ok(());
    }
    children.sort_by(|a, b| (&a.1, &a.0).cmp(&(&b.1, &b.0)));
    let parents = ids_json(children.iter().map(|(_, parent)| parent.as_str()))?;
    // In id order, so two transactions lock the parents they share alike.
    let waiting: Vec<String> = sqlx::query_scalar(sql(format!(
        "SELECT t.id FROM tasks t WHERE t.id IN (SELECT j.value->>'id' FROM {}) \
         AND t.status = {SUSPENDED} AND t.wait_kind = 'children' ORDER BY t.id {}",
        DIALECT.json_rows, DIALECT.row_lock
    )))
    .bind(&parents)
    .fetch_all(&mut *tx)
    .await?;
    if waiting.is_empty() {
        return Ok(());
    }
    for parent in waiting {
        let mut forgot = 0;
        for (child, _) in children.iter().filter(|(_, p)| *p == parent) {
            forgot += sqlx::query("DELETE FROM awaits WHERE task_id = $1 AND child_id = $2")
                .bind(&parent)
                .bind(child)
                .execute(&mut *tx)
                .await?
                .rows_affected();
        }
        if forgot == 0 {
            continue;
        }
        let left: Option<String> =
            sqlx::query_scalar("SELECT child_id FROM awaits WHERE task_id = $1 LIMIT 1")
                .bind(&parent)
                .fetch_optional(&mut *tx)
                .await?;
        if left.is_none() {
            super::signal::wake(tx, &parent, now).await?;
        }
    }
    Ok(())
}
