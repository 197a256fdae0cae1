//! The task history's counts: what the HSC saw of executions, per lambda
//! and minute, kept in memory and added to the store every few seconds.
//!
//! Ended tasks are pruned, so the dashboard's charts cannot be drawn from
//! the tasks table; and a write per task would cost the hot path what the
//! history is worth. So the HSC counts, in memory, each claim's
//! schedule-to-start latency (first executions only: a retry waits for its
//! backoff) and each accepted result's outcome, under the lambda and the
//! minute of its store clock, and [`History::run`] adds the counts to the
//! store's minutes every [`FLUSH_INTERVAL`] in one additive upsert (several
//! HSCs add to the same rows), and once more when the process stops.
//!
//! A crash loses what was counted since the last flush: at most a few
//! seconds of one HSC's counts. A flush the store refuses keeps its counts
//! for the next one.
//!
//! The queue depth is not the HSC's to see: the pruner samples it once a
//! minute ([`crate::pruner`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use waft_core::TaskStatus;
use waft_store::{
    ClaimedTask, HistoryAdd, Millis, MinuteCounts, Refusal, ResultOutcome, ResultRecorded,
    StoreError, TaskStore, minute_of,
};

/// How often the counts are added to the store.
pub const FLUSH_INTERVAL: Duration = Duration::from_secs(5);

/// How an execution's result counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    Succeeded,
    Failed,
    /// A suspension: the execution ended, the task did not.
    Neither,
}

impl Counted {
    /// How a result with `outcome` counts.
    pub fn of(outcome: &ResultOutcome) -> Self {
        match outcome {
            ResultOutcome::Success { .. } => Counted::Succeeded,
            ResultOutcome::Fatal { .. } | ResultOutcome::Retriable { .. } => Counted::Failed,
            ResultOutcome::Suspend { .. } => Counted::Neither,
        }
    }
}

/// One process's counts not yet in the store.
pub struct History {
    store: Arc<dyn TaskStore>,
    counts: Mutex<HashMap<(String, Millis), MinuteCounts>>,
}

impl History {
    pub fn new(store: Arc<dyn TaskStore>) -> Self {
        Self {
            store,
            counts: Mutex::new(HashMap::new()),
        }
    }

    /// Counts the latency of the tasks claimed at `now` that start their
    /// first execution.
    pub fn claimed<'a>(&self, tasks: impl IntoIterator<Item = &'a ClaimedTask>, now: Millis) {
        let minute = minute_of(now);
        let mut counts = crate::lock(&self.counts);
        for task in tasks.into_iter().filter(|t| t.attempt == 1) {
            entry(&mut counts, &task.lambda, minute)
                .latency
                .record(now.saturating_sub(task.scheduled_at));
        }
    }

    /// Counts the results accepted at `now`: each answer beside how its
    /// result counts.
    pub fn ended<'a>(
        &self,
        answers: impl IntoIterator<Item = (&'a Result<ResultRecorded, Refusal>, Counted)>,
        now: Millis,
    ) {
        let minute = minute_of(now);
        let mut counts = crate::lock(&self.counts);
        for (answer, counted) in answers {
            let Ok(recorded) = answer else { continue };
            if counted == Counted::Neither {
                continue;
            }
            let entry = entry(&mut counts, &recorded.lambda, minute);
            match counted {
                Counted::Succeeded => entry.succeeded += 1,
                _ => {
                    entry.failed += 1;
                    if recorded.status == TaskStatus::Dead {
                        entry.dead += 1;
                    }
                }
            }
        }
    }

    /// Adds the counts to the store; on a failure they are kept for the
    /// next flush.
    pub async fn flush(&self) -> Result<(), StoreError> {
        let taken: Vec<MinuteCounts> = {
            let mut counts = crate::lock(&self.counts);
            if counts.is_empty() {
                return Ok(());
            }
            counts.drain().map(|(_, c)| c).collect()
        };
        let added = self
            .store
            .history_add(HistoryAdd {
                minutes: taken.clone(),
            })
            .await;
        if added.is_err() {
            let mut counts = crate::lock(&self.counts);
            for kept in taken {
                entry(&mut counts, &kept.lambda, kept.minute).merge(&kept);
            }
        }
        added
    }

    /// Flushes every `interval`, and once more when `stop` fires.
    pub async fn run(self: Arc<Self>, interval: Duration, stop: CancellationToken) {
        loop {
            let stopping = tokio::select! {
                () = stop.cancelled() => true,
                () = tokio::time::sleep(interval) => false,
            };
            if let Err(error) = self.flush().await {
                tracing::warn!(%error, "cannot add the task history's counts; kept for the next flush");
            }
            if stopping {
                return;
            }
        }
    }
}

fn entry<'a>(
    counts: &'a mut HashMap<(String, Millis), MinuteCounts>,
    lambda: &str,
    minute: Millis,
) -> &'a mut MinuteCounts {
    counts
        .entry((lambda.to_owned(), minute))
        .or_insert_with(|| MinuteCounts {
            lambda: lambda.to_owned(),
            minute,
            ..MinuteCounts::default()
        })
}
