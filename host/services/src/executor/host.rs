//! What an execution's lambda reaches outside its instance: its progress
//! note (carried by the watchdog's next heartbeat), the children it
//! schedules through the Frontend, in batches (`children.rs`), up to the
//! executor's `max_children` (a lambda scheduling in a loop would otherwise
//! fill the shared store at the speed of its loop), its task's journal,
//! written through the HSC at each durability point (`commit.rs`, over
//! `durable.rs`), and the signals and children's states it waits for, read
//! through the HSC (`waits.rs`).
//!
//! Here: the host an execution holds and the calls the runtime makes on
//! it ([`TaskHost`]); each call's work lives beside it, one concern a file.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use waft_runtime::{ChildRequest, KillSwitch, LeaseLost, ScheduleRejection, TaskHost, Unread};
use waft_store::{ChildrenState, JournalWrite, TaskChildrenRead, TaskSignalRead};

use super::children::{Children, child_id};
use crate::{FrontendApi, HscApi, RunAt, TaskRequest, lock};

/// What a running lambda's host calls reach.
///
/// A heartbeat from the lambda records its progress note; the watchdog
/// carries it to the HSC with the next heartbeat. So a lambda may call it
/// as often as it likes, and hears "lease lost" as soon as the watchdog
/// does.
pub(super) struct ExecutionHost {
    pub(super) frontend: Arc<dyn FrontendApi>,
    pub(super) hsc: Arc<dyn HscApi>,
    pub(super) task_id: String,
    /// Children and journal writes carry it: the store takes them only
    /// while this execution still holds the task (fencing).
    pub(super) lease_token: i64,
    /// The lambda version it runs, as claimed: its journal writes pin the
    /// task to it.
    pub(super) version: u32,
    pub(super) kill: KillSwitch,
    pub(super) progress: Mutex<Option<String>>,
    /// Children a task may have, by rank; each beyond is refused.
    pub(super) max_children: usize,
    /// Where the task's journal ends in the store, as far as this
    /// execution knows: its claim's length, then the end of each write.
    pub(super) journal_end: AtomicU32,
    /// The messages of journal writes this execution sent and the store
    /// took: the next one is numbered on from it.
    pub(super) journal_sent: AtomicU32,
    /// How long a journal write waits for an unreachable HSC.
    pub(super) journal_patience: Duration,
    /// The execution's span's context: the children it schedules join its
    /// trace, their `schedule` spans its children.
    pub(super) trace: Option<waft_core::TraceContext>,
    /// Its children waiting for their batch.
    pub(super) children: Children,
    /// The generation of the task's journal its children are named by:
    /// the claim's, one more once the execution discarded the journal.
    pub(super) journal_generation: AtomicU32,
}

impl ExecutionHost {
    /// The idempotency key of the task's child of rank `rank` in its
    /// journal's generation `generation`: the same in every attempt that
    /// replays the same journal, so a retried parent does not schedule a
    /// child twice (the rank counts replayed children too), and new in a
    /// journal started afresh. Generation 0 keeps the keys made before
    /// generations were.
    pub(super) fn child_key(task_id: &str, generation: u32, rank: u32) -> String {
        match generation {
            0 => format!("child:{task_id}:{rank}"),
            _ => format!("child:{task_id}:g{generation}:{rank}"),
        }
    }
}

#[async_trait]
impl TaskHost for ExecutionHost {
    async fn heartbeat(&self, progress: Option<String>) -> Result<(), LeaseLost> {
        if let Some(reason) = self.kill.reason() {
            return Err(LeaseLost {
                reason: reason.to_owned(),
            });
        }
        if progress.is_some() {
            *lock(&self.progress) = progress;
        }
        Ok(())
    }

    async fn schedule(&self, child: ChildRequest) -> Result<String, ScheduleRejection> {
        if let Some(reason) = self.kill.reason() {
            return Err(ScheduleRejection::LeaseLost(reason.to_owned()));
        }
        // The rank counts the task's children across its attempts, so the
        // bound holds for the task, however often it is retried.
        if child.rank as usize >= self.max_children {
            return Err(ScheduleRejection::Denied(format!(
                "a task may schedule at most {} children (executor.max_children)",
                self.max_children
            )));
        }
        // Checked here, as the store would: a child the store refused in
        // a batch would end the execution.
        if let Some(key) = &child.key {
            waft_core::task::check_key(key).map_err(ScheduleRejection::Invalid)?;
        }
        let run_at = match child.not_before {
            None => RunAt::Now,
            Some(at) => RunAt::At(waft_core::model::millis_of(at)),
        };
        let generation = self.journal_generation.load(Ordering::Acquire);
        let request = TaskRequest {
            id: Some(child_id(&self.task_id, generation, child.rank)),
            lambda: child.lambda,
            payload: child.payload,
            collection: child.collection,
            priority: child.priority,
            key: child.key,
            run_at,
            idempotency_key: Some(Self::child_key(&self.task_id, generation, child.rank)),
            parent_id: Some(self.task_id.clone()),
            parent_lease: Some(self.lease_token),
            trace: self.trace.clone(),
            ..TaskRequest::default()
        };
        self.schedule_child(request).await
    }

    async fn settle(&self) -> Result<(), LeaseLost> {
        self.write_children()
            .await
            .map_err(|reason| LeaseLost { reason })
    }

    async fn journal(&self, write: JournalWrite) -> Result<(), LeaseLost> {
        if let Some(reason) = self.kill.reason() {
            return Err(LeaseLost {
                reason: reason.to_owned(),
            });
        }
        self.settle().await?;
        self.commit(write).await.map_err(|failure| LeaseLost {
            reason: failure.message().to_owned(),
        })
    }

    async fn discard_journal(&self) -> Result<(), LeaseLost> {
        self.start_generation().await
    }

    async fn signal(&self, name: &str, taken: u32) -> Result<Option<Vec<u8>>, Unread> {
        let read = TaskSignalRead {
            id: self.task_id.clone(),
            lease_token: self.lease_token,
            name: name.to_owned(),
            taken,
        };
        self.read("signals", || self.hsc.task_signal_read(read.clone()))
            .await
    }

    async fn children(&self, ids: &[String]) -> Result<ChildrenState, Unread> {
        self.write_children().await.map_err(Unread::LeaseLost)?;
        let read = TaskChildrenRead {
            id: self.task_id.clone(),
            lease_token: self.lease_token,
            children: ids.to_vec(),
        };
        self.read("children", || self.hsc.task_children_read(read.clone()))
            .await
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::sync::Mutex;

    use waft_runtime::{Allocator, ChildRequest, Runtime, RuntimeConfig};
    use waft_store::{ResultOutcome, SqliteStore, TaskResult, TaskStore};

    use super::super::durable::tests::JournalHsc;
    use super::*;
    use crate::{Frontend, SystemClock, Wake};

    #[test]
    fn a_childs_key_is_its_task_generation_and_rank() {
        assert_eq!(
            ExecutionHost::child_key("01J0PARENT", 0, 0),
            "child:01J0PARENT:0"
        );
        assert_eq!(
            ExecutionHost::child_key("01J0PARENT", 0, 41),
            "child:01J0PARENT:41"
        );
        assert_eq!(
            ExecutionHost::child_key("01J0PARENT", 2, 41),
            "child:01J0PARENT:g2:41"
        );
    }

    /// An execution of task `t` (lease 7, version 3, a journal of 4
    /// entries) over `hsc`, with a Frontend on an empty store.
    pub(in crate::executor) async fn host(
        hsc: Arc<JournalHsc>,
        max_children: usize,
    ) -> ExecutionHost {
        let store: Arc<dyn TaskStore> =
            Arc::new(SqliteStore::connect("sqlite::memory:").await.unwrap());
        host_on(store, hsc, max_children)
    }

    /// The same execution, with a Frontend on `store`.
    pub(in crate::executor) fn host_on(
        store: Arc<dyn TaskStore>,
        hsc: Arc<JournalHsc>,
        max_children: usize,
    ) -> ExecutionHost {
        let runtime = Runtime::new(RuntimeConfig {
            allocator: Allocator::OnDemand,
            ..RuntimeConfig::default()
        })
        .unwrap();
        let frontend = Frontend::new(
            store,
            Arc::new(SystemClock),
            Arc::new(runtime),
            Arc::new(Wake::default()),
        );
        ExecutionHost {
            frontend: Arc::new(frontend),
            hsc,
            task_id: "t".into(),
            lease_token: 7,
            version: 3,
            kill: KillSwitch::new(),
            progress: Mutex::new(None),
            max_children,
            journal_end: AtomicU32::new(4),
            journal_sent: AtomicU32::new(0),
            journal_patience: Duration::from_secs(30),
            trace: None,
            children: Default::default(),
            journal_generation: AtomicU32::new(0),
        }
    }

    /// A result of task `t` (lease 7) with `output` bytes of output and
    /// `journal` as its journal's change.
    pub(in crate::executor) fn result(output: usize, journal: JournalWrite) -> TaskResult {
        TaskResult {
            id: "t".into(),
            lease_token: 7,
            outcome: ResultOutcome::Success {
                output: Some(vec![b'o'; output]),
            },
            log: None,
            journal: Some(journal),
            replayed: 4,
        }
    }

    /// A child past the bound is refused before it reaches the Frontend,
    /// whatever the attempt: the bound counts the task's children by rank.
    #[tokio::test]
    async fn a_child_past_the_bound_is_refused_by_its_rank() {
        let host = host(Arc::new(JournalHsc::default()), 2).await;
        let child = |rank| ChildRequest {
            lambda: "mail".into(),
            payload: Vec::new(),
            collection: None,
            priority: None,
            not_before: None,
            key: None,
            rank,
        };
        let refused = host.schedule(child(2)).await.unwrap_err();
        assert!(
            matches!(&refused, ScheduleRejection::Denied(m) if m.contains("executor.max_children")),
            "{refused:?}"
        );
        // Within the bound it reaches the Frontend, which refuses it for
        // reasons of its own (its store is empty).
        let reached = host.schedule(child(1)).await.unwrap_err();
        assert!(
            matches!(&reached, ScheduleRejection::Invalid(m) if m.contains("unknown lambda")),
            "{reached:?}"
        );
    }
}
