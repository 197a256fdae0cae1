//! What an execution's lambda reaches outside its instance: its progress
//! note (carried by the watchdog's next heartbeat), the children it
//! schedules through the Frontend, in batches (`children.rs`), up to the
//! executor's `max_children` (a lambda scheduling in a loop would otherwise
//! fill the shared store at the speed of its loop), its task's journal,
//! written through the HSC at each durability point (`durable.rs`), and the
//! signals it waits for, read through the HSC.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use waft_core::limits::MAX_BATCH_BYTES;
use waft_runtime::{ChildRequest, KillSwitch, LeaseLost, ScheduleRejection, TaskHost, Unread};
use waft_store::{
    ChildrenState, JournalWrite, Refusal, TaskChildrenRead, TaskResult, TaskSignalRead,
};

use super::children::{Children, child_id};
use super::durable::{JournalFailure, JournalLink};
use crate::batch::WireSize;
use crate::{FrontendApi, HscApi, RunAt, ServiceError, ServiceResult, TaskRequest, lock};

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

    /// Writes `write` to the task's journal; on failure the execution is
    /// stopped, with the reason.
    pub(super) async fn commit(&self, write: JournalWrite) -> Result<(), JournalFailure> {
        let end = write.end();
        let link = JournalLink {
            hsc: self.hsc.as_ref(),
            kill: &self.kill,
            patience: self.journal_patience,
        };
        let sent = self.journal_sent.load(Ordering::Acquire);
        match link
            .write(&self.task_id, self.lease_token, self.version, sent, write)
            .await
        {
            Ok(sent) => {
                self.journal_sent.store(sent, Ordering::Release);
                self.journal_end.store(end, Ordering::Release);
                Ok(())
            }
            Err(failure) => {
                let reason = format!("cannot write the task's journal: {}", failure.message());
                if self.kill.kill(reason) {
                    tracing::warn!(task = %self.task_id, lease = self.lease_token, ?failure, "journal write failed; stopping the execution");
                }
                Err(failure)
            }
        }
    }

    /// Where the task's journal ends, as far as this execution knows.
    pub(super) fn journal_end(&self) -> u32 {
        self.journal_end.load(Ordering::Acquire)
    }

    /// `result` as one message carries it: when its journal would make it
    /// larger than a batch, the journal is written first, on its own (in as
    /// many messages as it takes), and the result goes without it. `None`
    /// when the lease was lost meanwhile: there is nothing to report.
    pub(super) async fn carried(&self, mut result: TaskResult) -> Option<TaskResult> {
        // Whatever the result, the children the lambda was told of exist
        // before it is reported.
        if let Err(reason) = self.write_children().await {
            tracing::warn!(task = %result.id, %reason, "reporting nothing");
            return None;
        }
        if result.wire_size() <= MAX_BATCH_BYTES {
            return Some(result);
        }
        let Some(journal) = result.journal.take() else {
            // Too large without a journal: the reporter fits it.
            return Some(result);
        };
        match self.commit(journal).await {
            Ok(()) => Some(result),
            Err(JournalFailure::LeaseLost(reason)) => {
                tracing::warn!(task = %result.id, %reason, "the lease was lost before the result; reporting nothing");
                None
            }
            // Only entries that reached nothing outside wait for the result
            // (the others were written before the lambda saw them): without
            // them the next attempt makes those calls live again.
            Err(JournalFailure::Failed(reason)) => {
                tracing::warn!(task = %result.id, %reason, "the journal's tail is lost; reporting the result without it");
                Some(result)
            }
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

/// What a read of what an execution waits for came to.
enum Read<T> {
    Answered(T),
    Refused(Refusal),
    Invalid(String),
}

impl ExecutionHost {
    /// What the execution waits for (its task's `what`), read from the
    /// HSC under its lease. An unreachable HSC is asked again, as for a
    /// journal write: a blip must not cost the task an attempt.
    async fn read<T, F>(&self, what: &str, call: impl FnMut() -> F) -> Result<T, Unread>
    where
        F: Future<Output = ServiceResult<Result<T, Refusal>>>,
    {
        if let Some(reason) = self.kill.reason() {
            return Err(Unread::LeaseLost(reason.to_owned()));
        }
        let link = JournalLink {
            hsc: self.hsc.as_ref(),
            kill: &self.kill,
            patience: self.journal_patience,
        };
        let give_up_at = tokio::time::Instant::now() + self.journal_patience;
        let mut call = call;
        // A request the store finds wrong (a task that is not a child) is
        // the lambda's to hear, not one to ask again.
        let asked = link.retrying(give_up_at, || {
            let answer = call();
            async move {
                match answer.await {
                    Ok(Ok(answer)) => Ok(Read::Answered(answer)),
                    Ok(Err(refusal)) => Ok(Read::Refused(refusal)),
                    Err(ServiceError::InvalidArgument(why)) => Ok(Read::Invalid(why)),
                    Err(error) => Err(error),
                }
            }
        });
        match asked.await {
            Ok(Read::Answered(answer)) => Ok(answer),
            Ok(Read::Refused(refusal)) => Err(Unread::LeaseLost(format!(
                "the HSC refused task {}'s {what} ({refusal:?}): the lease is lost",
                self.task_id
            ))),
            Ok(Read::Invalid(why)) => Err(Unread::Invalid(why)),
            Err(JournalFailure::LeaseLost(reason)) => Err(Unread::LeaseLost(reason)),
            Err(JournalFailure::Failed(reason)) => Err(Unread::Unavailable(reason)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::SystemTime;

    use waft_runtime::{Allocator, ChildRequest, Runtime, RuntimeConfig};
    use waft_store::{JournalEntry, ResultOutcome, SqliteStore, TaskStore};

    use super::super::durable::tests::JournalHsc;
    use super::*;
    use crate::journal_entry;
    use crate::{Clock, Frontend, SystemClock, Wake};

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
    async fn host(hsc: Arc<JournalHsc>, max_children: usize) -> ExecutionHost {
        let store: Arc<dyn TaskStore> =
            Arc::new(SqliteStore::connect("sqlite::memory:").await.unwrap());
        host_on(store, hsc, max_children)
    }

    fn host_on(
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

    fn result(output: usize, journal: JournalWrite) -> TaskResult {
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

    /// A store with lambdas `mail` and `paced` (which has a schedule
    /// quota), and the host of a running execution of a `mail` task.
    async fn running() -> (Arc<dyn TaskStore>, ExecutionHost) {
        let store: Arc<dyn TaskStore> =
            Arc::new(SqliteStore::connect("sqlite::memory:").await.unwrap());
        let now = SystemClock.now();
        for (name, quota_per_sec) in [("paced", Some(1_000.0)), ("mail", None)] {
            let config = waft_core::LambdaConfig {
                quota_per_sec,
                allowed_children: vec!["paced".into()],
                ..waft_core::LambdaConfig::default()
            };
            let deploy = waft_store::LambdaDeploy {
                name: name.into(),
                digest: format!("digest-of-{name}"),
                component: name.as_bytes().to_vec(),
                artifact: None,
                config,
                now,
            };
            store.lambda_deploy(deploy).await.unwrap();
        }
        let parent = waft_store::NewTask {
            lambda: "mail".into(),
            ..waft_store::NewTask::default()
        };
        let tasks = vec![parent];
        let id = store
            .task_insert_many(waft_store::TaskInsertMany { tasks, now })
            .await
            .unwrap()
            .remove(0)
            .id;
        let ready = waft_store::TaskEnqueueReady {
            now,
            limit: 10,
            enqueue_timeout: Duration::from_secs(60),
        };
        let token = store.task_enqueue_ready(ready).await.unwrap().enqueued[0].enqueue_token;
        let claims = waft_store::TaskClaimMany {
            claims: vec![(id.clone(), token)],
            now,
            claim_timeout: Duration::from_secs(60),
        };
        let claimed = store
            .task_claim_many(claims)
            .await
            .unwrap()
            .remove(0)
            .unwrap();
        let mut host = host_on(store.clone(), Arc::new(JournalHsc::default()), 100);
        host.task_id = id;
        host.lease_token = claimed.lease_token;
        (store, host)
    }

    fn child_of(lambda: &str, rank: u32) -> ChildRequest {
        ChildRequest {
            lambda: lambda.into(),
            payload: b"{}".to_vec(),
            collection: None,
            priority: None,
            not_before: None,
            key: None,
            rank,
        }
    }

    async fn children_of(store: &dyn TaskStore, parent: &str) -> Vec<String> {
        let list = waft_store::TaskList {
            parent_id: Some(parent.into()),
            ..waft_store::TaskList::default()
        };
        let mut ids: Vec<String> = store
            .task_list(list)
            .await
            .unwrap()
            .into_iter()
            .map(|task| task.id)
            .collect();
        ids.sort();
        ids
    }

    /// The first child of a lambda, collection and priority is written at
    /// once; the next ones are answered at once and written before the
    /// execution's next step outside, under the ids they were answered
    /// with, which are the same in every attempt.
    #[tokio::test]
    async fn children_wait_for_their_batch_under_the_ids_they_were_told() {
        let (store, host) = running().await;
        let first = host.schedule(child_of("mail", 0)).await.unwrap();
        assert_eq!(first, child_id(&host.task_id, 0, 0));
        assert_eq!(
            children_of(store.as_ref(), &host.task_id).await,
            vec![first.clone()]
        );
        let mut told = Vec::new();
        for rank in [1, 2] {
            told.push(host.schedule(child_of("mail", rank)).await.unwrap());
        }
        assert_eq!(
            told,
            [child_id(&host.task_id, 0, 1), child_id(&host.task_id, 0, 2)]
        );
        assert_eq!(children_of(store.as_ref(), &host.task_id).await.len(), 1);
        host.settle().await.unwrap();
        let mut all = vec![first, told[0].clone(), told[1].clone()];
        all.sort();
        assert_eq!(children_of(store.as_ref(), &host.task_id).await, all);
        // A journal write and a result write them too (and a read of the
        // children, which this HSC does not answer).
        host.schedule(child_of("mail", 3)).await.unwrap();
        host.journal(JournalWrite::default()).await.unwrap();
        assert_eq!(children_of(store.as_ref(), &host.task_id).await.len(), 4);
        host.schedule(child_of("mail", 4)).await.unwrap();
        let mut done = result(0, JournalWrite::default());
        done.id = host.task_id.clone();
        assert!(host.carried(done).await.is_some());
        assert_eq!(children_of(store.as_ref(), &host.task_id).await.len(), 5);
    }

    /// A child waiting for its batch is written soon even when the lambda
    /// takes no step outside for long (it computes): the execution's
    /// writer beside it writes what has waited a moment.
    #[tokio::test]
    async fn a_waiting_child_is_written_soon_whatever_the_lambda_does() {
        let (store, host) = running().await;
        host.schedule(child_of("mail", 0)).await.unwrap();
        host.schedule(child_of("mail", 1)).await.unwrap();
        assert_eq!(children_of(store.as_ref(), &host.task_id).await.len(), 1);
        let written = async {
            while children_of(store.as_ref(), &host.task_id).await.len() < 2 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::select! {
            () = written => {}
            never = host.write_children_when_due() => match never {},
            () = tokio::time::sleep(Duration::from_secs(10)) => panic!("the child still waits"),
        }
    }

    /// Children the store could refuse are written at once, each answered
    /// as the store answers: of a lambda with a schedule quota, due later,
    /// or of another collection than those taken.
    #[tokio::test]
    async fn a_child_the_store_could_refuse_is_written_at_once() {
        let (store, host) = running().await;
        let later = ChildRequest {
            not_before: Some(SystemTime::now() + Duration::from_secs(60)),
            ..child_of("mail", 2)
        };
        let other = ChildRequest {
            collection: Some("other".into()),
            ..child_of("mail", 3)
        };
        let requests = [child_of("paced", 0), child_of("paced", 1), later, other];
        for (written, child) in requests.into_iter().enumerate() {
            host.schedule(child).await.unwrap();
            let stored = children_of(store.as_ref(), &host.task_id).await.len();
            assert_eq!(stored, written + 1);
        }
    }

    /// A child's key reaches the store, in a batch as alone; a key the
    /// store would refuse is refused at once, before any batch holds it.
    #[tokio::test]
    async fn a_childs_key_is_kept_and_a_bad_one_refused_at_once() {
        let (store, host) = running().await;
        let keyed = |rank, key: &str| ChildRequest {
            key: Some(key.into()),
            ..child_of("mail", rank)
        };
        host.schedule(keyed(0, "acme")).await.unwrap();
        host.schedule(keyed(1, "globex")).await.unwrap();
        let refused = host.schedule(keyed(2, "")).await.unwrap_err();
        assert!(
            matches!(&refused, ScheduleRejection::Invalid(m) if m.contains("key")),
            "{refused:?}"
        );
        host.settle().await.unwrap();
        let list = waft_store::TaskList {
            parent_id: Some(host.task_id.clone()),
            ..waft_store::TaskList::default()
        };
        let mut keys: Vec<Option<String>> = store
            .task_list(list)
            .await
            .unwrap()
            .into_iter()
            .map(|task| task.key)
            .collect();
        keys.sort();
        assert_eq!(keys, [Some("acme".into()), Some("globex".into())]);
    }

    /// A batch the store refuses stops the execution, which reports
    /// nothing: its lambda was told of children that do not exist.
    #[tokio::test]
    async fn a_refused_batch_stops_the_execution() {
        let (store, host) = running().await;
        host.schedule(child_of("mail", 0)).await.unwrap();
        host.schedule(child_of("mail", 1)).await.unwrap();
        // The task ends under the execution, which no longer holds it.
        store
            .task_cancel(&host.task_id, SystemClock.now())
            .await
            .unwrap();
        assert!(host.settle().await.is_err());
        assert!(host.kill.reason().unwrap().contains("told were scheduled"));
        assert_eq!(children_of(store.as_ref(), &host.task_id).await.len(), 1);
        host.schedule(child_of("mail", 2)).await.unwrap_err();
        let mut done = result(0, JournalWrite::default());
        done.id = host.task_id.clone();
        assert_eq!(host.carried(done).await, None);
    }

    #[tokio::test]
    async fn a_result_that_fits_keeps_its_journal() {
        let hsc = Arc::new(JournalHsc::default());
        let host = host(hsc.clone(), 10).await;
        let write = JournalWrite {
            from: 4,
            entries: vec![journal_entry(4, 10)],
        };
        let carried = host.carried(result(10, write.clone())).await.unwrap();
        assert_eq!(carried.journal, Some(write));
        assert!(hsc.writes.lock().unwrap().is_empty());
    }

    /// A journal's tail that would make its result too large for a message
    /// is written first, in messages of its own, and the result goes
    /// without it.
    #[tokio::test]
    async fn a_journal_too_large_for_its_result_is_written_first() {
        let hsc = Arc::new(JournalHsc::default());
        let host = host(hsc.clone(), 10).await;
        let write = JournalWrite {
            from: 4,
            entries: (4..7).map(|seq| journal_entry(seq, 6 << 20)).collect(),
        };
        let carried = host.carried(result(10 << 20, write.clone())).await.unwrap();
        assert_eq!(carried.journal, None);
        assert_eq!(carried.replayed, 4);
        assert!(carried.wire_size() <= MAX_BATCH_BYTES);
        let writes = hsc.writes.lock().unwrap().clone();
        assert!(writes.len() >= 2, "{} writes", writes.len());
        assert!(
            writes
                .iter()
                .all(|w| (w.id.as_str(), w.lease_token, w.version) == ("t", 7, 3))
        );
        let written: Vec<JournalEntry> = writes.into_iter().flat_map(|w| w.write.entries).collect();
        assert_eq!(written, write.entries);
        assert_eq!(host.journal_end(), 7);
    }

    /// Refused on the way: the lease is gone, nothing is reported, and
    /// the execution is stopped with the reason.
    #[tokio::test]
    async fn a_refused_journal_leaves_nothing_to_report() {
        let hsc = Arc::new(JournalHsc {
            lost: true,
            ..JournalHsc::default()
        });
        let host = host(hsc, 10).await;
        let write = JournalWrite {
            from: 4,
            entries: (4..7).map(|seq| journal_entry(seq, 6 << 20)).collect(),
        };
        assert_eq!(host.carried(result(10 << 20, write)).await, None);
        assert!(host.kill.reason().unwrap().contains("journal"));
        // And a durability point hears it as a lost lease.
        let lost = host.journal(JournalWrite::default()).await.unwrap_err();
        assert!(lost.reason.contains("journal"), "{lost:?}");
    }
}
