//! Suspensions: executions that ended in a wait (a timer, a signal,
//! children). Each is its own guarded update, followed by the look that
//! catches a signal sent or a child ended while the execution ran.

use waft_core::TaskStatus;

use super::super::lease::lease_refusal;
use super::super::{Connection, fan_in, signal};
use super::{Batch, Suspension};
use crate::names::status::{RUNNING, SUSPENDED};
use crate::support::{sql, text_in};
use crate::{AttemptOutcome, Millis, Result, Wait};

/// Suspends the tasks whose executions ended in a wait, each in an update
/// guarded like the others: the task waits, holding no lease, until its
/// wait is over (its due time and trigger), and the attempt its execution
/// took is given back ([`waft_core::machine`]'s `Suspend`).
pub(super) async fn suspend(
    tx: &mut Connection,
    suspensions: Vec<Suspension>,
    now: Millis,
    batch: &mut Batch,
) -> Result<()> {
    for Suspension {
        ending,
        until,
        wait,
    } in suspensions
    {
        let signal = match &wait {
            Wait::Timer | Wait::Children { .. } => None,
            Wait::Signal { name, .. } => Some(text_in(name)),
        };
        let suspended: Option<String> = sqlx::query_scalar(sql(format!(
            "UPDATE tasks SET status = {SUSPENDED}, \
             attempt = CASE WHEN attempt > 0 THEN attempt - 1 ELSE 0 END, \
             due_at = $3, next_trigger_at = $3, held = FALSE, log = $4, \
             wait_kind = $5, wait_signal = $6 \
             WHERE id = $1 AND lease_token = $2 AND (status IN {RUNNING}) IS TRUE \
             RETURNING lambda"
        )))
        .bind(text_in(&ending.id))
        .bind(ending.lease)
        .bind(until)
        .bind(ending.log.as_deref().map(text_in))
        .bind(wait.kind())
        .bind(signal)
        .fetch_optional(&mut *tx)
        .await?;
        let index = ending.index;
        let Some(lambda) = suspended else {
            let refusal = lease_refusal(&mut *tx, &ending.id, ending.lease).await?;
            batch.answer(index, Err(refusal));
            continue;
        };
        batch.of_lambda(index, lambda);
        // A signal sent while the execution ran, after its last look: the
        // row lock the update took orders this against every send.
        match &wait {
            Wait::Timer => {}
            Wait::Signal { name, taken } => {
                signal::woken_by_a_kept_signal(&mut *tx, &ending.id, name, *taken, now).await?;
            }
            // Children that ended while the execution ran, after its last
            // look, are not awaited (and wake it when none is left).
            Wait::Children { ids } => {
                fan_in::await_children(&mut *tx, &ending.id, ids, now).await?;
            }
        }
        batch.ended(ending, AttemptOutcome::Suspended, None);
        batch.answer(index, Ok(TaskStatus::Suspended));
    }
    Ok(())
}
