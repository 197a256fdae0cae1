//! Results: a batch of executions' ends, each a guarded update that a
//! stale lease cannot pass; the journal writes they carry, the attempts
//! they ended (those that did not end their task for good: see
//! `attempt.rs`), and the continuations of the successes.
//!
//! This file holds the batch: how its results are sorted by what they
//! need, the journal writes applied ahead of them, and the answers in the
//! results' places. Each kind of end is a module of its own, since each
//! is its own statements and its own race with a stale lease:
//! `finals.rs` (successes and fatal failures, and the successes'
//! continuations), `retries.rs` (retriable failures, planned from their
//! tasks' attempts and backoff) and `suspensions.rs` (executions that
//! ended in a wait).

mod finals;
mod retries;
mod suspensions;

use std::collections::HashSet;

use waft_core::TaskStatus;

use super::Connection;
use super::attempt::{self, Ended};
use super::fan_in;
use super::journal;
use super::lease::lease_refusal;
use crate::rules::check_journal_write;
use crate::{
    AttemptOutcome, JournalWrite, Millis, Refusal, Result, ResultOutcome, ResultRecorded,
    StoreError, TaskResult, TaskSetResultMany, Wait,
};
use finals::end_finals;
use retries::{apply_retries, plan_retries};
use suspensions::suspend;

/// Records a batch of results. Successes and fatal failures end their
/// tasks in one guarded update; a retriable failure first reads its task's
/// attempts and its version's backoff; a suspension is one guarded update
/// of its own; a second result for a task already
/// in the batch is judged after the first has ended it. Each answer is in
/// its result's place.
///
/// A result's journal write is applied first, fenced by the same lease as
/// the result (see [`write_journals`]). A malformed one is the runtime's
/// bug and fails the whole batch: nothing of it is written.
pub(super) async fn set_result_many(
    tx: &mut Connection,
    params: TaskSetResultMany,
) -> Result<Vec<Result<ResultRecorded, Refusal>>> {
    let now = params.now;
    for result in &params.results {
        if let Some(write) = &result.journal {
            check_journal_write(&result.id, write)?;
        }
    }
    let mut batch = Batch::new(params.results.len());
    let Sorted {
        mut finals,
        mut retries,
        mut suspensions,
        repeats,
    } = sort(params.results);
    let endings = finals
        .iter_mut()
        .map(|f| &mut f.ending)
        .chain(retries.iter_mut().map(|r| &mut r.ending))
        .chain(suspensions.iter_mut().map(|s| &mut s.ending));
    write_journals(&mut *tx, endings).await?;
    end_finals(&mut *tx, finals, now, &mut batch).await?;
    suspend(&mut *tx, suspensions, now, &mut batch).await?;
    let planned = plan_retries(&mut *tx, retries, now, &mut batch).await?;
    apply_retries(&mut *tx, planned, &mut batch).await?;
    attempt::record(&mut *tx, std::mem::take(&mut batch.executions), now).await?;
    // Last, and once: the parents waiting for children this batch ended
    // are locked after every row of the batch, in one order (see
    // `fan_in`).
    fan_in::ended(&mut *tx, std::mem::take(&mut batch.children), now).await?;
    for repeat in repeats {
        let refusal = lease_refusal(&mut *tx, &repeat.id, repeat.lease).await?;
        batch.answer(repeat.index, Err(refusal));
    }
    batch.answers()
}

/// One result of a batch: where its answer goes, whose lease it ran
/// under, what it logged, and what it did with its task's journal.
struct Ending {
    index: usize,
    id: String,
    lease: i64,
    log: Option<String>,
    journal: Option<JournalWrite>,
    replayed: u32,
}

/// A success or a fatal failure: it ends its task whatever the task's
/// attempts, and the task's row keeps it (no row of `attempts`).
struct Final {
    ending: Ending,
    status: TaskStatus,
    output: Option<Vec<u8>>,
    error: Option<String>,
}

/// A retriable failure, before its task is read.
struct Retry {
    ending: Ending,
    error: String,
    retry_after: Option<std::time::Duration>,
}

/// An execution that ended in a wait lasting until `until`, or until the
/// signal it waits for.
struct Suspension {
    ending: Ending,
    until: Millis,
    wait: Wait,
}

/// A batch's results by what they need.
struct Sorted {
    finals: Vec<Final>,
    retries: Vec<Retry>,
    suspensions: Vec<Suspension>,
    /// Second results for a task, judged after the first.
    repeats: Vec<Ending>,
}

fn sort(results: Vec<TaskResult>) -> Sorted {
    let mut sorted = Sorted {
        finals: Vec::new(),
        retries: Vec::new(),
        suspensions: Vec::new(),
        repeats: Vec::new(),
    };
    let mut seen = HashSet::new();
    for (index, result) in results.into_iter().enumerate() {
        let ending = Ending {
            index,
            lease: result.lease_token,
            log: result.log,
            journal: result.journal,
            replayed: result.replayed,
            id: result.id,
        };
        if !seen.insert(ending.id.clone()) {
            sorted.repeats.push(ending);
            continue;
        }
        match result.outcome {
            ResultOutcome::Success { output } => sorted.finals.push(Final {
                ending,
                status: TaskStatus::Success,
                output,
                error: None,
            }),
            ResultOutcome::Fatal { error } => sorted.finals.push(Final {
                ending,
                status: TaskStatus::FatalFailure,
                output: None,
                error: Some(error),
            }),
            ResultOutcome::Retriable { error, retry_after } => sorted.retries.push(Retry {
                ending,
                error,
                retry_after,
            }),
            ResultOutcome::Suspend { until, wait } => {
                sorted.suspensions.push(Suspension {
                    ending,
                    until,
                    wait,
                });
            }
        }
    }
    sorted
}

/// A batch's answers, by the results' places, and the executions it
/// ended (for the attempts table), as the steps find them.
struct Batch {
    answers: Vec<Option<Result<TaskStatus, Refusal>>>,
    /// The lambda of each accepted result's task, by the results' places.
    lambdas: Vec<String>,
    executions: Vec<Ended>,
    /// `(task, parent)` of the tasks the batch ended that have a parent.
    children: Vec<(String, String)>,
}

impl Batch {
    fn new(results: usize) -> Self {
        Self {
            answers: vec![None; results],
            lambdas: vec![String::new(); results],
            executions: Vec::new(),
            children: Vec::new(),
        }
    }

    fn answer(&mut self, index: usize, answer: Result<TaskStatus, Refusal>) {
        self.answers[index] = Some(answer);
    }

    /// An execution ended as `outcome`: recorded with its error and log.
    fn ended(&mut self, ending: Ending, outcome: AttemptOutcome, error: Option<String>) {
        self.executions.push(Ended::new(
            &ending.id,
            ending.lease,
            outcome,
            error.as_deref(),
            ending.log.as_deref(),
            ending.replayed,
        ));
    }

    /// An accepted result's task is of `lambda`.
    fn of_lambda(&mut self, index: usize, lambda: String) {
        self.lambdas[index] = lambda;
    }

    fn answers(self) -> Result<Vec<Result<ResultRecorded, Refusal>>> {
        self.answers
            .into_iter()
            .zip(self.lambdas)
            .map(|(answer, lambda)| {
                let answer =
                    answer.ok_or_else(|| StoreError::Corrupt("a result went unanswered".into()))?;
                Ok(answer.map(|status| ResultRecorded { status, lambda }))
            })
            .collect()
    }
}

/// Applies the journal writes of a batch's results (their first result
/// for each task), each fenced by its result's lease, before the results
/// themselves: a write the lease refuses writes nothing, and its result,
/// guarded by the same lease in the same transaction, is then refused
/// too; a write it lets through has locked the task's row (on Postgres),
/// so its result is accepted. The journal is pinned to the version the
/// lease was claimed with, which a result does not name. The rows are
/// taken in id order, so two batches never wait on each other's.
async fn write_journals(
    tx: &mut Connection,
    endings: impl Iterator<Item = &mut Ending>,
) -> Result<()> {
    let mut writes: Vec<_> = endings
        .filter_map(|e| Some((e.id.clone(), e.lease, e.journal.take()?)))
        .collect();
    writes.sort_by(|a, b| a.0.cmp(&b.0));
    for (id, lease, write) in writes {
        // A refusal is the result's to answer.
        let _refused = journal::apply(&mut *tx, &id, lease, None, &write).await?;
    }
    Ok(())
}
