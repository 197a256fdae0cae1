//! A journal discarded mid-attempt starts a new generation.
//!
//! A lambda deployed `--on-divergence restart` that diverges from its
//! journal starts afresh, and the ranks of the children it schedules start
//! again at 0. Children are named by the task's id, its journal's
//! generation and their rank, so before the fresh run schedules anything
//! the execution cuts the stored journal to nothing with the claim's
//! generation + 1, in one write (the store keeps the generation with it).
//! The fresh run's children are then new ones, and every later attempt,
//! replaying the fresh journal under that stored generation, names them
//! alike. An execution that stops before that write leaves the old journal
//! and generation: the next attempt diverges again and names the same new
//! children.

use std::sync::atomic::Ordering;

use waft_runtime::{LeaseLost, TaskHost};
use waft_store::{JournalPart, JournalWrite};

use super::durable::{JournalFailure, JournalLink};
use super::host::ExecutionHost;
use crate::JournalCommit;

impl ExecutionHost {
    /// Discards the task's journal in the store and moves the execution on
    /// to the journal's next generation; `Err` when the lease is lost, or
    /// the HSC could not be reached in time (the execution is then
    /// stopped).
    pub(super) async fn start_generation(&self) -> Result<(), LeaseLost> {
        // The run that diverged may have been told of children not yet
        // written: they exist, under its generation, first.
        self.settle().await?;
        let generation = self
            .journal_generation
            .load(Ordering::Acquire)
            .saturating_add(1);
        let sent = self.journal_sent.load(Ordering::Acquire);
        let commit = JournalCommit {
            id: self.task_id.clone(),
            lease_token: self.lease_token,
            version: self.version,
            write: JournalWrite::default(),
            part: Some(JournalPart {
                after: sent,
                start: 0,
                more: false,
            }),
            generation: Some(generation),
        };
        let link = JournalLink {
            hsc: self.hsc.as_ref(),
            kill: &self.kill,
            patience: self.journal_patience,
        };
        let give_up_at = tokio::time::Instant::now() + self.journal_patience;
        let written = link
            .retrying(give_up_at, || self.hsc.task_journal_write(commit.clone()))
            .await;
        let failure = match written {
            Ok(Ok(())) => {
                self.journal_sent.store(sent + 1, Ordering::Release);
                self.journal_end.store(0, Ordering::Release);
                self.journal_generation.store(generation, Ordering::Release);
                return Ok(());
            }
            Ok(Err(refusal)) => JournalFailure::LeaseLost(format!(
                "the HSC refused task {}'s journal ({refusal:?}): the lease is lost",
                self.task_id
            )),
            Err(failure) => failure,
        };
        let reason = format!("cannot discard the task's journal: {}", failure.message());
        if self.kill.kill(reason.clone()) {
            tracing::warn!(task = %self.task_id, lease = self.lease_token, ?failure, "discarding the journal failed; stopping the execution");
        }
        Err(LeaseLost { reason })
    }
}
