//! The Heartbeat & Status Controller: claims, heartbeats and results, on
//! the store, with lease tokens enforced.
//!
//! The HSC is the only writer of execution state. It owns the two timeouts
//! that bring a task back when its executor vanishes: a claimed task must
//! heartbeat within `heartbeat_timeout` of its claim, and a running one
//! within `heartbeat_timeout` of its last heartbeat. One timeout serves
//! both, so [`HeartbeatConfig::validate`]'s rule — an executor cut off from
//! the HSC stops its task before the timeout — covers the claimed state
//! too.
//!
//! Its answer to a batch of claims carries the claimed tasks' payloads, and
//! is cut to what one message carries (`batch`): a task whose
//! payload no answer could carry (stored under an earlier, wider bound) is
//! failed at once, with the reason, instead of being claimed and lost again
//! and again; the Controller asks for no more than fits, by the lambdas'
//! payload limits, and a task claimed beyond what fits is left to its
//! claim timeout.
//!
//! It also keeps durable lambdas' journals: an execution writes its
//! entries through [`HscApi::task_journal_write`] under its lease, and the
//! next one reads them back through [`HscApi::task_journal_read`], a page
//! at most one message long.
//!
//! It counts what it sees for the task history ([`History`]): claims'
//! schedule-to-start latency and results' outcomes, in memory, added to
//! the store every few seconds by [`History::run`], no write per task.

use std::sync::Arc;

use async_trait::async_trait;
use waft_core::limits::{MAX_BATCH_BYTES, MAX_CARRIED, cut_note};
use waft_core::{TaskStatus, machine};
use waft_store::{
    ChildrenState, ClaimedTask, Heartbeat, JournalEntry, Refusal, ResultOutcome, TaskChildrenRead,
    TaskClaimMany, TaskHeartbeatMany, TaskJournalRead, TaskJournalWrite, TaskResult,
    TaskSetResultMany, TaskSignalRead, TaskStore,
};

use crate::batch::{Budget, Filling, WireSize};
use crate::history::{Counted, History};
use crate::{
    Clock, HeartbeatConfig, HscApi, JournalCommit, JournalPage, ServiceError, ServiceResult,
};

/// Journal entries one read takes from the store at most: the page is then
/// cut by bytes.
const MAX_JOURNAL_PAGE: u32 = 10_000;

/// Requests larger than this are refused: a batch is one transaction.
pub const MAX_BATCH: usize = 10_000;

/// The HSC role.
pub struct Hsc {
    store: Arc<dyn TaskStore>,
    clock: Arc<dyn Clock>,
    heartbeat: HeartbeatConfig,
    history: Arc<History>,
}

impl Hsc {
    /// An HSC over `store`, with the timing every executor also uses.
    pub fn new(
        store: Arc<dyn TaskStore>,
        clock: Arc<dyn Clock>,
        heartbeat: HeartbeatConfig,
    ) -> Self {
        Self {
            history: Arc::new(History::new(store.clone())),
            store,
            clock,
            heartbeat,
        }
    }

    /// The counts of the task history; [`History::run`] adds them to the
    /// store.
    pub fn history(&self) -> Arc<History> {
        self.history.clone()
    }

    /// The claims' answers as one message carries them: a task no answer
    /// could carry is failed, with the reason; one beyond what fits beside
    /// the others is not handed out, and comes back after its claim
    /// timeout.
    async fn carried(
        &self,
        answers: Vec<Result<ClaimedTask, Refusal>>,
    ) -> ServiceResult<Vec<Result<ClaimedTask, Refusal>>> {
        let mut filling = Filling::new(Budget::items(usize::MAX));
        let mut carried = Vec::with_capacity(answers.len());
        for answer in answers {
            carried.push(match answer {
                Ok(task) if task.wire_size() > MAX_BATCH_BYTES => Err(self.fail(task).await),
                Ok(task) if !filling.admit(task.wire_size()) => {
                    tracing::warn!(task = %task.id, "claimed beyond what one answer carries; it comes back after its claim timeout");
                    Err(Refusal::WrongState(TaskStatus::Claimed))
                }
                other => other,
            });
        }
        Ok(carried)
    }

    /// Fails a claimed task whose payload no message carries; what to
    /// answer for it. Should the store fail meanwhile, the task comes back
    /// after its claim timeout, and its neighbours' claims stand.
    async fn fail(&self, task: ClaimedTask) -> Refusal {
        let error = format!(
            "payload of {} bytes is over the {MAX_CARRIED} one task carries between Waft's \
             processes: it cannot be handed to an executor",
            task.payload.len()
        );
        tracing::warn!(task = %task.id, %error, "claimed task failed");
        let result = TaskResult {
            id: task.id,
            lease_token: task.lease_token,
            outcome: ResultOutcome::Fatal { error },
            log: None,
            journal: None,
            replayed: 0,
        };
        let now = self.clock.now();
        let failed = self
            .store
            .task_record_many(TaskSetResultMany {
                results: vec![result],
                now,
            })
            .await;
        if let Ok(answers) = &failed {
            // The history counts it as the failure it is.
            let counted = answers.iter().map(|answer| (answer, Counted::Failed));
            self.history.ended(counted, now);
        }
        match failed.map(|mut answers| answers.pop()) {
            Ok(Some(Ok(recorded))) => Refusal::WrongState(recorded.status),
            Ok(Some(Err(refusal))) => refusal,
            Ok(None) => Refusal::WrongState(TaskStatus::Claimed),
            Err(error) => {
                tracing::warn!(%error, "cannot fail the task; it comes back after its claim timeout");
                Refusal::WrongState(TaskStatus::Claimed)
            }
        }
    }
}

fn check_batch(len: usize, what: &str) -> ServiceResult<()> {
    if len > MAX_BATCH {
        return Err(ServiceError::ResourceExhausted(format!(
            "{len} {what} in one request; send at most {MAX_BATCH}"
        )));
    }
    Ok(())
}

#[async_trait]
impl HscApi for Hsc {
    async fn task_claim_many(
        &self,
        claims: Vec<(String, i64)>,
    ) -> ServiceResult<Vec<Result<ClaimedTask, Refusal>>> {
        check_batch(claims.len(), "claims")?;
        let now = self.clock.now();
        let answers = self
            .store
            .task_claim_many(TaskClaimMany {
                claims,
                now,
                claim_timeout: self.heartbeat.heartbeat_timeout,
            })
            .await?;
        let answers = self.carried(answers).await?;
        self.history
            .claimed(answers.iter().filter_map(|a| a.as_ref().ok()), now);
        Ok(answers)
    }

    async fn task_heartbeat_many(
        &self,
        beats: Vec<Heartbeat>,
    ) -> ServiceResult<Vec<Result<(), Refusal>>> {
        check_batch(beats.len(), "heartbeats")?;
        // Executors cut their lambdas' notes; one that does not (an older
        // release, any other caller) gets no longer note stored.
        let beats = beats
            .into_iter()
            .map(|beat| Heartbeat {
                progress: beat.progress.map(cut_note),
                ..beat
            })
            .collect::<Vec<_>>();
        let metrics = crate::metrics::metrics();
        metrics.heartbeat_calls.inc();
        metrics.heartbeats.inc_by(beats.len() as u64);
        Ok(self
            .store
            .task_heartbeat_many(TaskHeartbeatMany {
                beats,
                now: self.clock.now(),
                heartbeat_timeout: self.heartbeat.heartbeat_timeout,
            })
            .await?)
    }

    async fn task_set_result_many(
        &self,
        results: Vec<TaskResult>,
    ) -> ServiceResult<Vec<Result<TaskStatus, Refusal>>> {
        check_batch(results.len(), "results")?;
        let counted: Vec<Counted> = results.iter().map(|r| Counted::of(&r.outcome)).collect();
        let now = self.clock.now();
        let answers = self
            .store
            .task_record_many(TaskSetResultMany { results, now })
            .await?;
        self.history.ended(answers.iter().zip(counted), now);
        Ok(answers
            .into_iter()
            .map(|answer| answer.map(|recorded| recorded.status))
            .collect())
    }

    async fn task_journal_write(
        &self,
        commit: JournalCommit,
    ) -> ServiceResult<Result<(), Refusal>> {
        // The store checks the write (its numbering and bounds, refused as
        // `InvalidArgument`) and the lease in one transaction.
        Ok(self
            .store
            .task_journal_write(TaskJournalWrite {
                id: commit.id,
                lease_token: commit.lease_token,
                version: commit.version,
                write: commit.write,
                part: commit.part,
                generation: commit.generation,
            })
            .await?)
    }

    async fn task_journal_read(
        &self,
        page: JournalPage,
    ) -> ServiceResult<Result<Vec<JournalEntry>, Refusal>> {
        // One point read: a stale executor learns that its lease is gone
        // before it replays anything (it could write nothing anyway).
        let Some(task) = self.store.task_get(&page.id).await? else {
            return Ok(Err(Refusal::NotFound));
        };
        if task.lease_token != page.lease_token {
            return Ok(Err(Refusal::StaleLease {
                current: task.lease_token,
            }));
        }
        if !machine::RUNNING.contains(task.status) {
            return Ok(Err(Refusal::WrongState(task.status)));
        }
        let entries = self
            .store
            .task_journal(TaskJournalRead {
                id: page.id,
                from: page.from,
                limit: page.limit.clamp(1, MAX_JOURNAL_PAGE),
                without_answers: false,
            })
            .await?;
        Ok(Ok(fit_page(entries)))
    }

    async fn task_signal_read(
        &self,
        read: TaskSignalRead,
    ) -> ServiceResult<Result<Option<Vec<u8>>, Refusal>> {
        // The store fences the read by the lease, as a journal read is.
        Ok(self.store.task_signal_read(read).await?)
    }

    async fn task_children_read(
        &self,
        read: TaskChildrenRead,
    ) -> ServiceResult<Result<ChildrenState, Refusal>> {
        Ok(self.store.task_children_read(read).await?)
    }
}

/// The first of `entries` that one answer carries: at least one (an entry's
/// answer is bounded well under a message), then as many as fit in
/// [`MAX_BATCH_BYTES`].
fn fit_page(entries: Vec<JournalEntry>) -> Vec<JournalEntry> {
    let mut filling = Filling::new(Budget::items(usize::MAX));
    entries
        .into_iter()
        .take_while(|entry| filling.admit(entry.wire_size()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal_entry;

    /// A page of the journal is cut to what one answer carries, but holds
    /// an entry while any is left: the reader always moves on.
    #[test]
    fn a_page_is_cut_by_bytes_and_never_empty() {
        let large: Vec<JournalEntry> = (0..5).map(|seq| journal_entry(seq, 6 << 20)).collect();
        let page = fit_page(large.clone());
        assert_eq!(page, large[..2]);
        let small: Vec<JournalEntry> = (0..1000).map(|seq| journal_entry(seq, 100)).collect();
        assert_eq!(fit_page(small.clone()), small);
        let huge = vec![journal_entry(0, MAX_BATCH_BYTES), journal_entry(1, 1)];
        assert_eq!(fit_page(huge.clone()), huge[..1]);
        assert!(fit_page(Vec::new()).is_empty());
    }
}
