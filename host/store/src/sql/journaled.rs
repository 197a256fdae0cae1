//! The journals of a lambda's live tasks, read page by page for a check of
//! new code against them (`waft lambda deploy --check`): each task whole,
//! with every entry of its journal, in id order.
//!
//! Two statements a page, whatever its size: the tasks, then their entries
//! in one read. A journal may hold up to 64 MiB of answers, so a page ends
//! after the task whose entries take it past [`PAGE_BYTES`]; the next page
//! starts after the last task it holds.
//!
//! A move ([`move_checked`]) takes the tasks a check found clean to the
//! version it checked, each only as it was checked: the same lease (a claim
//! changes it), the same journal length (a write changes it), not running.
//! So a task claimed meanwhile runs on the version it had, whole, and one
//! moved is claimed on its new version.

use futures::TryStreamExt;
use serde::Serialize;

use super::{Connection, DIALECT, Store};
use crate::names::status::{LIVE, WAITING};
use crate::rows::{self, TASK_COLUMNS};
use crate::support::{batch_json, sql, text_in};
use crate::{JournalEntry, JournaledTask, JournaledTasks, Result, TaskMove};

/// The answers' bytes a page carries before it ends, after a whole task.
const PAGE_BYTES: usize = 16 << 20;

/// A task of the page, as the entries' read takes it (the field name is
/// its JSON key).
#[derive(Serialize)]
struct Listed<'a> {
    id: &'a str,
}

pub(super) async fn page(store: &Store, params: JournaledTasks) -> Result<Vec<JournaledTask>> {
    let limit = params.limit.clamp(1, 1000);
    let rows = sqlx::query(sql(format!(
        "SELECT {TASK_COLUMNS}, journal_version FROM tasks \
         WHERE lambda = $1 AND status IN {LIVE} AND journal_len > 0 AND id > $2 \
         ORDER BY id LIMIT $3"
    )))
    .bind(text_in(&params.lambda))
    .bind(params.after.as_deref().map_or("".into(), text_in))
    .bind(i64::from(limit))
    .fetch_all(&store.pool)
    .await?;
    let mut tasks = Vec::with_capacity(rows.len());
    for row in &rows {
        let task = rows::task(row)?;
        let journal_version: Option<i64> = sqlx::Row::try_get(row, "journal_version")?;
        tasks.push(JournaledTask {
            task,
            journal_version: journal_version.and_then(|v| u32::try_from(v).ok()),
            entries: Vec::new(),
        });
    }
    if tasks.is_empty() {
        return Ok(tasks);
    }
    let listed: Vec<Listed> = tasks.iter().map(|t| Listed { id: &t.task.id }).collect();
    let listed = batch_json(&listed)?;
    let mut entries = sqlx::query(sql(format!(
        "SELECT task_id, seq, call, digest, answer, summary, outside, attempt, at, took_us \
         FROM journal WHERE task_id IN (SELECT j.value->>'id' FROM {}) \
         ORDER BY task_id, seq",
        DIALECT.json_rows
    )))
    .bind(&listed)
    .fetch(&store.pool);
    let mut bytes = 0;
    let mut at = 0;
    while let Some(row) = entries.try_next().await? {
        let task_id: String = sqlx::Row::try_get(&row, "task_id")?;
        let task_id = crate::support::text_out(task_id);
        if tasks[at].task.id != task_id {
            // The next task's entries: the page ends here when it is full.
            if bytes >= PAGE_BYTES {
                break;
            }
            let Some(next) = tasks[at..].iter().position(|t| t.task.id == task_id) else {
                continue;
            };
            at += next;
        }
        let entry: JournalEntry = rows::journal_entry(&row)?;
        bytes += entry.answer.len();
        tasks[at].entries.push(entry);
    }
    drop(entries);
    // Tasks past the last one read whole, and any whose journal was ended
    // meanwhile (a redrive `--fresh` between the two reads), wait for the
    // next page or are gone.
    tasks.truncate(at + 1);
    tasks.retain(|t| !t.entries.is_empty());
    Ok(tasks)
}

/// A task to move, as the update reads it (the field names are its JSON
/// keys).
#[derive(Serialize)]
struct Moving<'a> {
    id: &'a str,
    lease: i64,
    len: i64,
}

/// Moves the tasks of `params` that stand as they were checked to version
/// `params.to`: their journal's version, and the pin of those scheduled
/// on a version. Returns how many moved.
pub(super) async fn move_checked(tx: &mut Connection, params: TaskMove) -> Result<u64> {
    if params.tasks.is_empty() {
        return Ok(0);
    }
    let moving: Vec<Moving> = params
        .tasks
        .iter()
        .map(|t| Moving {
            id: &t.id,
            lease: t.lease_token,
            len: i64::from(t.journal_len),
        })
        .collect();
    let done = sqlx::query(sql(format!(
        "UPDATE tasks SET journal_version = $2, \
         version = CASE WHEN version IS NULL THEN NULL ELSE $2 END \
         FROM (SELECT j.value->>'id' AS move_id, CAST(j.value->>'lease' AS BIGINT) AS move_lease, \
            CAST(j.value->>'len' AS BIGINT) AS move_len FROM {}) AS m \
         WHERE tasks.id = m.move_id AND tasks.lambda = $3 AND tasks.status IN {WAITING} \
         AND tasks.lease_token = m.move_lease AND tasks.journal_len = m.move_len",
        DIALECT.json_rows
    )))
    .bind(batch_json(&moving)?)
    .bind(i64::from(params.to))
    .bind(text_in(&params.lambda))
    .execute(&mut *tx)
    .await?;
    Ok(done.rows_affected())
}
