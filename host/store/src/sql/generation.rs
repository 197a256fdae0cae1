//! Journal generations: a task's children are named by its id, its
//! journal's generation and their rank (`tasks.journal_generation`). The
//! rank starts again at 0 with an empty journal, so a journal discarded
//! must start a new generation, or the run that starts afresh would be
//! handed the children of the runs before instead of scheduling its own.
//! A redrive that discards a journal moves the generation on itself
//! (`task.rs`); an execution that discards one — a lambda deployed
//! `--on-divergence restart` diverging from its journal — sends the new
//! generation with the first write of the fresh journal, from entry 0,
//! and it is stored when that write lands, in its transaction. The
//! generation is stored rather than read from the journal: an empty
//! journal cannot tell a new generation from one whose entries were never
//! written. An execution that stops before that write leaves the old
//! journal and generation: the next attempt diverges again and names the
//! same new children.

use super::{Connection, journal};
use crate::support::text_in;
use crate::{Refusal, Result, StoreError, TaskJournalWrite};

/// Writes `params` to its task's journal ([`journal::write`]); a write
/// carrying a generation also stores it once the write lands whole.
pub(super) async fn write(
    tx: &mut Connection,
    params: TaskJournalWrite,
) -> Result<Result<(), Refusal>> {
    let Some(generation) = params.generation else {
        return journal::write(tx, params).await;
    };
    let start = params.part.map_or(params.write.from, |part| part.start);
    if start != 0 {
        return Err(StoreError::Invalid(format!(
            "task {}'s journal write starts at entry {start}: only a write from entry 0 starts \
             a journal's generation",
            params.id
        )));
    }
    let lands = params.part.is_none_or(|part| !part.more);
    let (id, lease) = (params.id.clone(), params.lease_token);
    let written = journal::write(tx, params).await?;
    if written.is_ok() && lands {
        sqlx::query("UPDATE tasks SET journal_generation = $3 WHERE id = $1 AND lease_token = $2")
            .bind(text_in(&id))
            .bind(lease)
            .bind(i64::from(generation))
            .execute(&mut *tx)
            .await?;
    }
    Ok(written)
}
