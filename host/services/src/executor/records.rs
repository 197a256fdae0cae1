//! The account of an execution: what the log, the metrics and the
//! execution journal record when it starts and ends, the outcome on its
//! `execute` span, and the result it reports — nothing when it was stopped,
//! its journal's change only when there is one.
//!
//! Apart from each execution's life in `mod.rs` because none of it changes
//! what runs: it is what a run tells the world once it has begun and once
//! it is over.

use waft_runtime::{Execution, Outcome};
use waft_store::{AttemptOutcome, ClaimedTask, JournalWrite, ResultOutcome, TaskResult};

use super::Executor;
use super::outcome::{self, render_log};
use crate::{WatchEnd, metrics, spans};

impl Executor {
    /// An execution begins: the log, the metrics and the journal say so
    /// before the guest runs.
    pub(super) fn note_started(&self, task: &ClaimedTask) {
        tracing::info!(task = %task.id, lease = task.lease_token, attempt = task.attempt, "execution started");
        record_start(task);
        if let Some(journal) = &self.journal {
            journal.started(&task.id, task.lease_token, task.attempt);
        }
    }

    /// An execution ended, its instance gone: these records bound its
    /// lifetime.
    pub(super) fn note_ended(&self, task: &ClaimedTask, execution: &Execution, watched: &WatchEnd) {
        tracing::info!(task = %task.id, lease = task.lease_token, outcome = execution.outcome.kind(), "execution ended");
        if let Some(journal) = &self.journal {
            let outcome = match watched {
                WatchEnd::Stopped(_) => "stopped",
                WatchEnd::Finished => execution.outcome.kind(),
            };
            journal.ended(&task.id, task.lease_token, outcome, execution.ended_at);
        }
        let metrics = metrics::metrics();
        for request in &execution.outbound {
            metrics.outbound_request(
                &task.lambda,
                &request.host,
                request.outcome,
                request.duration,
            );
        }
    }
}

/// What an ended execution reports, counted in the metrics: nothing when
/// its watchdog stopped it (its lease may be another's now) or it was
/// killed. Its journal's change goes with it unless it changes nothing
/// (the journal ends at `journal_end` in the store already).
pub(super) fn reported(
    task: ClaimedTask,
    execution: Execution,
    watched: WatchEnd,
    journal_end: u32,
) -> Option<TaskResult> {
    let metrics = metrics::metrics();
    if let WatchEnd::Stopped(why) = watched {
        tracing::warn!(task = %task.id, %why, "execution stopped by its watchdog; reporting nothing");
        metrics
            .self_terminations
            .get_or_create(&metrics::lambda(&task.lambda))
            .inc();
        metrics.execution_ended(&task.lambda, "stopped", execution.duration);
        return None;
    }
    metrics.execution_ended(&task.lambda, execution.outcome.kind(), execution.duration);
    if let Outcome::LimitExceeded { limit, .. } = &execution.outcome {
        metrics
            .limit_breaches
            .get_or_create(&metrics::LimitLabels {
                lambda: task.lambda.clone(),
                limit: limit.as_str(),
            })
            .inc();
    }
    if let Outcome::Killed { reason } = &execution.outcome {
        tracing::info!(task = %task.id, %reason, "execution stopped; reporting nothing");
    }
    let never_ran = matches!(execution.outcome, Outcome::HostError { .. });
    let journal = journal_change(execution.journal, journal_end, never_ran);
    let outcome = outcome::reported(execution.outcome)?;
    Some(TaskResult {
        id: task.id,
        lease_token: task.lease_token,
        outcome,
        log: render_log(&execution.log),
        journal,
        replayed: execution.replayed,
    })
}

/// How the attempt ended, on its `execute` span; `stopped` when it
/// reports nothing (its lease is gone, or it was stopped).
pub(super) fn record_outcome(span: &tracing::Span, result: Option<&TaskResult>) {
    let Some(result) = result else {
        span.record("waft.task.outcome", "stopped");
        return;
    };
    let (outcome, error) = match &result.outcome {
        ResultOutcome::Success { .. } => (AttemptOutcome::Success, None),
        ResultOutcome::Retriable { error, .. } => (AttemptOutcome::Retriable, Some(error)),
        ResultOutcome::Fatal { error } => (AttemptOutcome::Fatal, Some(error)),
        ResultOutcome::Suspend { .. } => (AttemptOutcome::Suspended, None),
    };
    spans::executed(span, outcome, error.map(String::as_str));
}

/// The change `write` to send with an execution's result: none when it
/// changes nothing (no entries, and the journal already ends where it would
/// cut it), or when the instance `never_ran` (a host error: nothing it did
/// is known, so its empty journal says nothing either).
fn journal_change(write: JournalWrite, journal_end: u32, never_ran: bool) -> Option<JournalWrite> {
    let unchanged = write.entries.is_empty() && write.from == journal_end;
    (!unchanged && !never_ran).then_some(write)
}

/// Counts a started execution and, for a first attempt, how long the task
/// waited from its due time.
fn record_start(task: &ClaimedTask) {
    let metrics = metrics::metrics();
    let labels = metrics::lambda(&task.lambda);
    metrics.started.get_or_create(&labels).inc();
    if task.attempt == 1 {
        let now = waft_core::model::millis_of(std::time::SystemTime::now());
        let waited = (now - task.scheduled_at).max(0) as f64 / 1000.0;
        metrics
            .schedule_to_start
            .get_or_create(&labels)
            .observe(waited);
    }
}

#[cfg(test)]
mod tests {
    use waft_store::JournalEntry;

    use super::*;

    fn entry(seq: u32) -> JournalEntry {
        JournalEntry {
            seq,
            call: "wasi:clocks/wall-clock.now".into(),
            digest: Vec::new(),
            answer: vec![1],
            summary: String::new(),
            outside: false,
            attempt: 1,
            at: 0,
            took_us: 0,
        }
    }

    /// A result writes the journal only when it changes it: a lambda that
    /// made no call, or whose calls were all written at durability
    /// points, adds nothing to its result.
    #[test]
    fn a_result_carries_only_a_change_to_the_journal() {
        let tail = JournalWrite {
            from: 4,
            entries: vec![entry(4)],
        };
        assert_eq!(journal_change(tail.clone(), 4, false), Some(tail));
        // Nothing new, and the journal already ends there.
        let nothing = JournalWrite {
            from: 4,
            entries: Vec::new(),
        };
        assert_eq!(journal_change(nothing, 4, false), None);
        assert_eq!(journal_change(JournalWrite::default(), 0, false), None);
        // A cut (a restart after a divergence discards the journal) is a
        // change.
        let cut = JournalWrite::default();
        assert_eq!(journal_change(cut.clone(), 4, false), Some(cut));
        // An instance that never ran says nothing of the journal.
        assert_eq!(journal_change(JournalWrite::default(), 4, true), None);
    }
}
