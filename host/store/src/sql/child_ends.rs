//! Children deleted before their parent: what a parent of another lambda
//! still reads of them.
//!
//! A lambda's owner may delete it (with its tasks, or once they ended) and
//! an operator may purge a dead letter; either takes tasks' rows that a live
//! parent of another owner still needs, since a parent learns how each of
//! its children ended from the child's row ([`super::fan_in`]). So before
//! such tasks go, each one with a live parent that is not going with it
//! leaves its end in `child_ends`, which the parent's
//! waits read as they read a child's row: an ended child its end, a child
//! deleted before it ended `dropped`, with an error saying it was deleted.
//! A parent suspended waiting for such a child counts it as ended and is
//! woken by the last, as by any child's end. The kept ends go with the
//! parent (`prune.rs`). One owner can thus neither wedge another's parent (asleep for
//! ever) nor break it (its wait refused on every retry).

use super::{Connection, DIALECT, fan_in};
use crate::Result;
use crate::names::status::{DROPPED, LIVE, UNFINISHED};
use crate::support::{sql, text_in};

/// Tasks about to be deleted, as the statements below select them: `$1`
/// is the lambda's name, or a JSON array of `{"name": id}`.
#[derive(Clone, Copy)]
pub(super) enum Doomed<'a> {
    /// Every task of a lambda.
    Lambda(&'a str),
    /// These tasks, by id, as a JSON array of `{"name": id}`.
    Ids(&'a str),
}

impl<'a> Doomed<'a> {
    /// Whether the task whose id is `id` (and lambda `lambda`) is doomed.
    fn holds(self, id: &str, lambda: &str) -> String {
        match self {
            Doomed::Lambda(_) => format!("{lambda} = $1"),
            Doomed::Ids(_) => format!(
                "{id} IN (SELECT j.value->>'name' FROM {})",
                DIALECT.json_rows
            ),
        }
    }

    fn param(self) -> &'a str {
        match self {
            Doomed::Lambda(name) | Doomed::Ids(name) => name,
        }
    }
}

/// Before the `doomed` tasks are deleted: keeps the end of each one whose
/// parent is live and stays, and counts each that had not ended as ended
/// for the parent suspended waiting for it (waking it when it was the
/// last). `why` is the error a child deleted before it ended reads.
pub(super) async fn keep(tx: &mut Connection, doomed: Doomed<'_>, why: &str) -> Result<()> {
    let child = doomed.holds("c.id", "c.lambda");
    let parent = doomed.holds("p.id", "p.lambda");
    sqlx::query(sql(format!(
        "INSERT INTO child_ends (child_id, parent_id, status, output, last_error) \
         SELECT c.id, c.parent_id, \
            CASE WHEN c.status IN {UNFINISHED} THEN {DROPPED} ELSE c.status END, \
            CASE WHEN c.status IN {UNFINISHED} THEN NULL ELSE c.output END, \
            CASE WHEN c.status IN {UNFINISHED} THEN $2 ELSE c.last_error END \
         FROM tasks c JOIN tasks p ON p.id = c.parent_id \
         WHERE {child} AND NOT ({parent}) AND p.status IN {LIVE} \
         ON CONFLICT (child_id) DO NOTHING"
    )))
    .bind(doomed.param())
    .bind(text_in(why))
    .execute(&mut *tx)
    .await?;
    // The parents still waiting for doomed children (which had not ended).
    let awaited: Vec<(String, String)> = sqlx::query_as(sql(format!(
        "SELECT c.id, p.id FROM awaits a JOIN tasks c ON c.id = a.child_id \
         JOIN tasks p ON p.id = a.task_id WHERE {child} AND NOT ({parent})"
    )))
    .bind(doomed.param())
    .fetch_all(&mut *tx)
    .await?;
    if !awaited.is_empty() {
        let now: crate::Millis = sqlx::query_scalar(DIALECT.clock)
            .fetch_one(&mut *tx)
            .await?;
        fan_in::ended(tx, awaited, now).await?;
    }
    sqlx::query(sql(format!(
        "DELETE FROM awaits WHERE child_id IN (SELECT c.id FROM tasks c WHERE {child})"
    )))
    .bind(doomed.param())
    .execute(&mut *tx)
    .await?;
    Ok(())
}
