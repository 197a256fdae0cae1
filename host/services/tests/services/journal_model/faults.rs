//! The faults of a case, injected between the executor and the HSC
//! ([`FaultyHsc`]): a killed execution's lease is refused from then on, as
//! the store refuses a lease that was taken over, so nothing it does
//! afterwards reaches the store; a late copy of an earlier journal write
//! is delivered under the same lease, as a retried message would be. The
//! controller ([`Controller`]) lets a killed lease lapse at once (it polls
//! the store as if the heartbeat timeout had passed) once the execution
//! is gone, rather than after the heartbeat timeout.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use waft_core::TaskStatus;
use waft_services::{
    ClientApi, ControllerApi, Hsc, HscApi, JournalCommit, JournalPage, NextWork, ServiceResult,
    read_journal,
};
use waft_store::{
    ChildrenState, ClaimedTask, Heartbeat, JournalEntry, Refusal, TaskChildrenRead,
    TaskEnqueueReady, TaskResult, TaskSignalRead,
};

use super::case::Fault;
use super::harness::{Execution, HEARTBEAT, World, held};
use crate::support::Installation;
/// The real HSC, with faults injected for the current case's task.
pub struct FaultyHsc {
    pub inner: Arc<Hsc>,
    pub world: Arc<World>,
    pub client: Arc<dyn ClientApi>,
}

fn stale() -> Refusal {
    Refusal::StaleLease { current: 0 }
}

impl FaultyHsc {
    /// The execution of the current case holding `lease`.
    fn execution(&self, id: &str, lease: i64) -> Option<usize> {
        self.world
            .with(|c| {
                (c.task == id)
                    .then(|| c.executions.iter().position(|e| e.lease == lease))
                    .flatten()
            })
            .flatten()
    }

    /// Notes a write the store took from execution `index`, and strikes
    /// if the case says so.
    async fn written(&self, index: usize, commit: &JournalCommit) {
        let redeliver = self
            .world
            .with(|c| {
                let execution = &mut c.executions[index];
                execution.writes += 1;
                let answers = World::answers(&commit.write.entries);
                match commit.part {
                    // A part staged before its write's last: nothing of it
                    // is in the journal yet (rule 2: a write lands whole).
                    Some(part) if part.more => {
                        if commit.write.from == part.start {
                            execution.staged.clear();
                        }
                        execution.staged.extend(answers);
                    }
                    Some(_) => {
                        let staged = std::mem::take(&mut execution.staged);
                        execution.committed.extend(staged);
                        execution.committed.extend(answers);
                    }
                    None => execution.committed.extend(answers),
                }
                let previous = execution.last_write.replace(commit.clone());
                match c.case.faults.get(&index) {
                    Some(Fault::AfterWrite(n)) if *n == c.executions[index].writes => {
                        self.world.kill(c, index);
                        None
                    }
                    Some(Fault::Redeliver(n)) if *n == c.executions[index].writes => {
                        self.world.kill(c, index);
                        previous
                    }
                    _ => None,
                }
            })
            .flatten();
        if let Some(late) = redeliver {
            // Whatever the store says to the late copy, nobody hears it.
            let _ = self.inner.task_journal_write(late).await;
        }
    }
}

#[async_trait]
impl HscApi for FaultyHsc {
    async fn task_claim_many(
        &self,
        claims: Vec<(String, i64)>,
    ) -> ServiceResult<Vec<Result<ClaimedTask, Refusal>>> {
        let claimed = self.inner.task_claim_many(claims).await?;
        let payload = self.world.with(|c| c.payload.clone());
        for claim in claimed.iter().flatten() {
            if Some(&claim.payload) != payload.as_ref() {
                continue;
            }
            self.world.with(|c| c.task = claim.id.clone());
            let journal = self.client.task_journal(&claim.id, true).await?;
            self.world.with(|c| {
                c.executions.push(Execution {
                    lease: claim.lease_token,
                    attempt: claim.attempt,
                    generation: c.generation,
                    before: held(&journal),
                    writes: 0,
                    last_write: None,
                    committed: BTreeMap::new(),
                    staged: BTreeMap::new(),
                    killed: false,
                    outcome: None,
                });
            });
        }
        Ok(claimed)
    }

    async fn task_heartbeat_many(
        &self,
        heartbeats: Vec<Heartbeat>,
    ) -> ServiceResult<Vec<Result<(), Refusal>>> {
        let (dead, alive): (Vec<_>, Vec<_>) = heartbeats
            .into_iter()
            .enumerate()
            .partition(|(_, h)| self.world.is_dead(&h.id, h.lease_token));
        let mut answers: Vec<Option<Result<(), Refusal>>> = vec![None; dead.len() + alive.len()];
        for (i, _) in &dead {
            answers[*i] = Some(Err(stale()));
        }
        let (places, alive): (Vec<usize>, Vec<Heartbeat>) = alive.into_iter().unzip();
        if !alive.is_empty() {
            for (i, answer) in places
                .into_iter()
                .zip(self.inner.task_heartbeat_many(alive).await?)
            {
                answers[i] = Some(answer);
            }
        }
        Ok(answers
            .into_iter()
            .map(|a| a.unwrap_or(Err(stale())))
            .collect())
    }

    async fn task_set_result_many(
        &self,
        results: Vec<TaskResult>,
    ) -> ServiceResult<Vec<Result<TaskStatus, Refusal>>> {
        let mut answers = Vec::with_capacity(results.len());
        // One at a time: few results arrive at once in these tests.
        for result in results {
            if self.world.is_dead(&result.id, result.lease_token) {
                answers.push(Err(stale()));
                continue;
            }
            let execution = self.execution(&result.id, result.lease_token);
            let write = result.journal.clone();
            let answer = self.inner.task_set_result_many(vec![result]).await?;
            let answer = answer.into_iter().next().unwrap_or(Err(stale()));
            if let (Some(index), Some(write), Ok(_)) = (execution, write, &answer) {
                self.world.with(|c| {
                    c.executions[index]
                        .committed
                        .extend(World::answers(&write.entries));
                });
            }
            answers.push(answer);
        }
        Ok(answers)
    }

    async fn task_journal_write(
        &self,
        commit: JournalCommit,
    ) -> ServiceResult<Result<(), Refusal>> {
        if self.world.is_dead(&commit.id, commit.lease_token) {
            return Ok(Err(stale()));
        }
        let answer = self.inner.task_journal_write(commit.clone()).await?;
        if answer.is_ok()
            && let Some(index) = self.execution(&commit.id, commit.lease_token)
        {
            self.written(index, &commit).await;
        }
        Ok(answer)
    }

    async fn task_journal_read(
        &self,
        page: JournalPage,
    ) -> ServiceResult<Result<Vec<JournalEntry>, Refusal>> {
        if self.world.is_dead(&page.id, page.lease_token) {
            return Ok(Err(stale()));
        }
        self.inner.task_journal_read(page).await
    }

    async fn task_signal_read(
        &self,
        read: TaskSignalRead,
    ) -> ServiceResult<Result<Option<Vec<u8>>, Refusal>> {
        if self.world.is_dead(&read.id, read.lease_token) {
            return Ok(Err(stale()));
        }
        self.inner.task_signal_read(read).await
    }

    async fn task_children_read(
        &self,
        read: TaskChildrenRead,
    ) -> ServiceResult<Result<ChildrenState, Refusal>> {
        if self.world.is_dead(&read.id, read.lease_token) {
            return Ok(Err(stale()));
        }
        self.inner.task_children_read(read).await
    }
}

/// Hands out every due task; lets a killed lease lapse once its execution
/// is gone, instead of after the heartbeat timeout.
pub struct Controller {
    pub installation: Arc<Installation>,
    pub hsc: Arc<FaultyHsc>,
    pub world: Arc<World>,
    pub executions_file: PathBuf,
}

impl Controller {
    /// Whether the executor says the execution holding `lease` ended.
    fn ended(&self, task: &str, lease: i64) -> bool {
        read_journal(&self.executions_file).is_ok_and(|records| {
            records.iter().any(|r| {
                r.task == task && r.lease == lease && r.event == waft_services::JournalEvent::End
            })
        })
    }
}

#[async_trait]
impl ControllerApi for Controller {
    async fn next_work(&self, request: NextWork) -> ServiceResult<Vec<ClaimedTask>> {
        let (task, lapse) = self
            .world
            .with(|c| (c.task.clone(), c.lapse.clone()))
            .unwrap_or_default();
        let mut now = self.installation.clock.now();
        if !lapse.is_empty() {
            if !lapse.iter().all(|lease| self.ended(&task, *lease)) {
                tokio::time::sleep(Duration::from_millis(20)).await;
                return Ok(Vec::new());
            }
            self.world.with(|c| c.lapse.clear());
            now += i64::try_from(HEARTBEAT.heartbeat_timeout.as_millis()).unwrap_or(0) + 1000;
        }
        let report = self
            .installation
            .store
            .task_enqueue_ready(TaskEnqueueReady {
                now,
                limit: request.max_tasks,
                enqueue_timeout: Duration::from_secs(60),
            })
            .await?;
        if report.enqueued.is_empty() {
            tokio::time::sleep(request.wait.min(Duration::from_millis(20))).await;
            return Ok(Vec::new());
        }
        let claims = report
            .enqueued
            .into_iter()
            .map(|task| (task.id, task.enqueue_token))
            .collect();
        let claimed = self.hsc.task_claim_many(claims).await?;
        Ok(claimed.into_iter().filter_map(Result::ok).collect())
    }
}
