//! What each role offers the others, as narrow traits.
//!
//! Every trait has two implementations: the role itself (`waft-services`,
//! used directly in `waft dev`, where all roles share a process) and a gRPC
//! client (`waft-client`, used when each role is its own process). Callers hold an
//! `Arc<dyn …Api>` and cannot tell which: one code path for both modes.
//!
//! The Frontend shows three faces: [`ClientApi`] to clients, [`AdminApi`]
//! for tokens and secrets, [`ClusterApi`] to the installation's executors.
//! Each of their calls is a [`Call`](crate::access::Call) of the table of
//! rights, which the Frontend checks its caller against whichever way the
//! call came.

use std::time::Duration;

use async_trait::async_trait;

use crate::error::ServiceResult;
use crate::limits::MAX_JOURNAL_ENTRIES;
use crate::model::{
    Artifact, Attempt, Backlog, CheckProgress, ChildrenState, ClaimedTask, Continuation, Cron,
    DeadSelector, DeployCheck, Gate, GateState, Heartbeat, JournalEntry, JournalPart, JournalWrite,
    Lambda, LambdaDeleted, LambdaVersion, Millis, MoveReport, Overview, QueueFills, Refusal,
    SealedSecrets, SecretInfo, SignalSent, StatusCount, Task, TaskChildrenRead, TaskCount,
    TaskInserted, TaskList, TaskResult, TaskSignalRead, Token, TokenRole,
};
use crate::{LambdaConfig, TaskStatus, TraceContext};

/// When a task should run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RunAt {
    /// As soon as possible.
    #[default]
    Now,
    /// At this Unix time in milliseconds.
    At(Millis),
    /// This long after the Frontend receives the request (its clock, not
    /// the client's).
    After(Duration),
}

/// A task a client asks for.
/// What [`ClientApi::task_history`] reads: the `range` up to now, at
/// `step` (whole minutes; `None` picks one giving at most 120 points).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HistoryQuery {
    pub lambda: Option<String>,
    pub range: Duration,
    pub step: Option<Duration>,
}

/// What [`ClientApi::task_journal_page`] reads.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JournalQuery {
    pub id: String,
    /// With each entry's answer, its secrets masked.
    pub answers: bool,
    /// The first entry wanted.
    pub from: u32,
    /// At most this many entries (0: as many as a page holds).
    pub limit: u32,
}

/// A page of a task's journal.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JournalSlice {
    /// In order, from the page's `from`.
    pub entries: Vec<JournalEntry>,
    /// Where the next page starts; `None` once this one reaches the end.
    pub next: Option<u32>,
}

/// The points of a history, oldest first, and the step between them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HistoryAnswer {
    pub step: Duration,
    pub points: Vec<crate::model::HistoryPoint>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct TaskRequest {
    pub lambda: String,
    pub payload: Vec<u8>,
    /// `default` when absent.
    pub collection: Option<String>,
    /// The lambda's default priority when absent.
    pub priority: Option<u8>,
    pub run_at: RunAt,
    /// A second request with the same key (per lambda) returns the first
    /// task instead of creating another.
    pub idempotency_key: Option<String>,
    /// The task's key within its lambda: what its limits per key count by.
    pub key: Option<String>,
    /// Collapse with the key's other debounced tasks arriving within this
    /// window (see [`crate::model::NewTask::debounce`]).
    pub debounce: Option<std::time::Duration>,
    pub parent_id: Option<String>,
    /// Run this version of the lambda, not the one current when it starts.
    pub version: Option<u32>,
    /// The parent's lease, when a running execution schedules the task:
    /// refused (`FailedPrecondition`) unless the parent still holds it.
    pub parent_lease: Option<i64>,
    /// On success, a task of another lambda with this one's output.
    pub then: Option<Continuation>,
    /// The trace the task joins: its client's, or its parent execution's.
    pub trace: Option<TraceContext>,
    /// The id a running execution chose for its child (only with
    /// `parent_lease`); a new id when absent.
    pub id: Option<String>,
}

/// A periodic schedule a client asks for: a task of `lambda` at every
/// occurrence of `cron`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CronRequest {
    pub lambda: String,
    /// Five fields (minute first) or six (seconds first).
    pub cron: String,
    /// An IANA time zone; UTC when absent.
    pub timezone: Option<String>,
    pub payload: Vec<u8>,
    pub collection: Option<String>,
    /// The key of the tasks it makes.
    pub key: Option<String>,
    pub priority: Option<u8>,
    /// After downtime: run every missed occurrence (true), or only the most
    /// recent one (false).
    pub catch_up: bool,
}

/// The Frontend as clients see it: tasks, lambdas, gates, dead tasks,
/// crons and statistics. Every call is checked against its caller's rights
/// ([`crate::access`]).
#[async_trait]
pub trait ClientApi: Send + Sync {
    /// Stores tasks, all or none; answers their ids in order.
    async fn task_schedule_many(&self, tasks: Vec<TaskRequest>)
    -> ServiceResult<Vec<TaskInserted>>;
    /// One task.
    async fn task_get(&self, id: &str) -> ServiceResult<Task>;
    /// Tasks in id order, filtered, one page.
    async fn task_list(&self, filter: TaskList) -> ServiceResult<Vec<Task>>;
    /// How many of a lambda's tasks are in each status, in life order
    /// (none in a status: absent).
    async fn task_count(&self, filter: TaskCount) -> ServiceResult<Vec<StatusCount>>;
    /// What every lambda's tasks are doing now, with the executions that
    /// ended within `window`.
    async fn lambda_stats(&self, window: Duration) -> ServiceResult<Overview>;
    /// The task history of one lambda, or of every lambda the caller may
    /// read added together ([`HistoryQuery`]): a point per step.
    async fn task_history(&self, query: HistoryQuery) -> ServiceResult<HistoryAnswer>;
    /// Cancels a task that has not ended.
    async fn task_cancel(&self, id: &str) -> ServiceResult<Task>;
    /// Sends a task that has not ended a signal: kept until a wait for a
    /// signal of `name` takes it, and waking the task when it is suspended
    /// in such a wait. `FailedPrecondition` for an ended task.
    async fn task_signal(
        &self,
        id: &str,
        name: &str,
        payload: Vec<u8>,
    ) -> ServiceResult<SignalSent>;
    /// A task's ended executions, oldest first: how each ended, its error
    /// and its log.
    async fn task_attempts(&self, id: &str) -> ServiceResult<Vec<Attempt>>;
    /// A task's journal, in order: each host call its executions made,
    /// with its summary, attempt, time and duration, but **without its
    /// answer** (an answer may hold an HTTP response's body; a person reads
    /// the summary) unless `answers` (for a local replay): then with each
    /// answer as the runtime encodes it, the values of the lambda's secrets
    /// masked in it. Whether an attempt replayed an entry is in its
    /// [`Attempt::replayed`]. `NotFound` for an unknown task.
    async fn task_journal(&self, id: &str, answers: bool) -> ServiceResult<Vec<JournalEntry>> {
        let mut entries = Vec::new();
        let mut from = 0;
        loop {
            let query = JournalQuery {
                id: id.to_owned(),
                answers,
                from,
                limit: 0,
            };
            let mut slice = self.task_journal_page(query).await?;
            entries.append(&mut slice.entries);
            match slice.next {
                Some(next) if next > from && entries.len() < MAX_JOURNAL_ENTRIES as usize => {
                    from = next;
                }
                Some(next) if next <= from => {
                    return Err(crate::ServiceError::Internal(format!(
                        "the journal of task {id} went back from entry {from} to {next}"
                    )));
                }
                _ => return Ok(entries),
            }
        }
    }
    /// One page of a task's journal ([`ClientApi::task_journal`] reads them
    /// all): the entries from `query.from`, cut to what one answer carries
    /// (a few megabytes, answers included) but holding one entry while any
    /// is left, with where the next page starts.
    async fn task_journal_page(&self, query: JournalQuery) -> ServiceResult<JournalSlice>;
    /// Checks a component and its config, and deploys them as the lambda's
    /// next version.
    async fn lambda_deploy(
        &self,
        name: &str,
        component: Vec<u8>,
        config: LambdaConfig,
    ) -> ServiceResult<Lambda>;
    /// Replays the journal of every live task of lambda `name` against a
    /// component and config that would be its next version, in the
    /// sandbox and answered from the journals alone, without storing
    /// anything: which tasks would resume cleanly on it, and where the
    /// others depart ([`DeployCheck`]). `progress` hears how far it is.
    async fn lambda_check(
        &self,
        name: &str,
        component: Vec<u8>,
        config: LambdaConfig,
        progress: &(dyn Fn(CheckProgress) + Send + Sync),
    ) -> ServiceResult<DeployCheck>;
    /// Moves to version `to` of lambda `name` (its current one when
    /// `None`) exactly its live tasks whose journals replay cleanly on it
    /// (as [`ClientApi::lambda_check`] replays them), each as it was
    /// replayed and not running; the others stay on the versions that wrote
    /// them ([`MoveReport`]).
    async fn lambda_move(
        &self,
        name: &str,
        to: Option<u32>,
        progress: &(dyn Fn(CheckProgress) + Send + Sync),
    ) -> ServiceResult<MoveReport>;
    /// A lambda at a version, or at its current one.
    async fn lambda_get(&self, name: &str, version: Option<u32>) -> ServiceResult<Lambda>;
    /// Every lambda at its current version.
    async fn lambda_list(&self) -> ServiceResult<Vec<Lambda>>;
    /// Makes an earlier version (the previous one when absent) current
    /// again, as a new version with its component and configuration.
    async fn lambda_rollback(&self, name: &str, to: Option<u32>) -> ServiceResult<Lambda>;
    /// Deletes a lambda with its versions, secrets, periodic schedules,
    /// gates and tasks; `FailedPrecondition` while tasks of it may still
    /// run, unless `drop_tasks` (they are deleted too, and an execution of
    /// one stops when its next heartbeat finds it gone).
    async fn lambda_delete(&self, name: &str, drop_tasks: bool) -> ServiceResult<LambdaDeleted>;
    /// Every kept version of a lambda, oldest first.
    async fn lambda_versions(&self, name: &str) -> ServiceResult<Vec<LambdaVersion>>;
    /// Sets a lambda's (or one collection's) gate; answers how many held
    /// tasks opening it released.
    async fn gate_set(
        &self,
        lambda: &str,
        collection: Option<&str>,
        state: GateState,
    ) -> ServiceResult<u64>;
    /// Every gate that is not open.
    async fn gate_list(&self) -> ServiceResult<Vec<Gate>>;
    /// Redrives dead tasks with a fresh attempt budget, on `version` of
    /// their lambda (pinned) or its current one; answers how many. Their
    /// journals are kept (the next attempt replays them) unless `fresh`, or
    /// a `version` is named: a journal replays only on the version that
    /// wrote it.
    async fn dead_redrive(
        &self,
        selector: DeadSelector,
        version: Option<u32>,
        fresh: bool,
    ) -> ServiceResult<u64>;
    /// Deletes dead letters for good, with their attempts, logs and
    /// journals: the ids given (each must be dead, or none is deleted), or
    /// every dead task of a lambda (and collection). Returns how many.
    async fn dead_purge(&self, selector: DeadSelector) -> ServiceResult<u64>;
    /// Checks and stores a periodic schedule; answers it with its first
    /// occurrence.
    async fn cron_create(&self, request: CronRequest) -> ServiceResult<Cron>;
    /// Every periodic schedule, by id.
    async fn cron_list(&self) -> ServiceResult<Vec<Cron>>;
    /// The next `count` occurrences of a cron expression (at most 100),
    /// without saving it; `InvalidArgument` says why it cannot be one.
    async fn cron_preview(
        &self,
        cron: &str,
        timezone: Option<&str>,
        count: u32,
    ) -> ServiceResult<Vec<Millis>>;
    /// Deletes a periodic schedule; its tasks already created stay.
    async fn cron_delete(&self, id: &str) -> ServiceResult<()>;
}

/// The Frontend's administration: API tokens and lambdas' secrets.
#[async_trait]
pub trait AdminApi: Send + Sync {
    /// Creates an API token; answers it and its secret, which is shown
    /// this once and never stored.
    async fn token_create(
        &self,
        name: &str,
        role: TokenRole,
        lambdas: Vec<String>,
    ) -> ServiceResult<(Token, String)>;
    /// Every token (without secrets), revoked ones included.
    async fn token_list(&self) -> ServiceResult<Vec<Token>>;
    /// Revokes a token: calls with it fail from now on.
    async fn token_revoke(&self, id: &str) -> ServiceResult<()>;
    /// Stores a secret of a lambda (replacing one of that name), sealed
    /// with the installation's key; no call ever answers its value.
    async fn secret_set(&self, lambda: &str, name: &str, value: &str) -> ServiceResult<()>;
    /// A lambda's secrets by name, without their values.
    async fn secret_list(&self, lambda: &str) -> ServiceResult<Vec<SecretInfo>>;
    /// Removes a secret of a lambda.
    async fn secret_remove(&self, lambda: &str, name: &str) -> ServiceResult<()>;
}

/// What the installation's own processes fetch from the Frontend to run
/// lambdas: components, compiled artifacts, sealed secrets, word of new
/// versions, and which queues to poll. (An executor schedules children
/// through [`ClientApi::task_schedule_many`], under its task's lease.)
#[async_trait]
pub trait ClusterApi: Send + Sync {
    /// A component's bytes by digest.
    async fn component_get(&self, digest: &str) -> ServiceResult<Vec<u8>>;
    /// The component `digest` as the deploying Frontend compiled it for an
    /// engine of fingerprint `engine`: none when it was compiled for
    /// another engine, or not at all.
    async fn artifact_get(&self, digest: &str, engine: &str) -> ServiceResult<Option<Artifact>>;
    /// Waits until the lambdas change (a deploy, a rollback) from the
    /// generation `seen`, at most `wait`; answers the generation then. A
    /// caller passes back what it was last answered: a change between two
    /// calls is never missed. Generations only differ or not: a restarted
    /// Frontend counts afresh, and its first answer differs.
    async fn lambda_changed(&self, seen: u64, wait: Duration) -> ServiceResult<u64>;
    /// Waits until the Store Consumer fills a queue after the fill
    /// generation `seen`, at most `wait`; answers the queues filled since
    /// then and the generation to pass next. How Controllers learn which
    /// queues to poll. An answer that says `missed` lists nothing: the
    /// caller looks at [`ClusterApi::queue_backlog`] instead.
    async fn queue_filled(&self, seen: u64, wait: Duration) -> ServiceResult<QueueFills>;
    /// Per `<lambda, priority>`, the oldest due task that has not started
    /// (new, retrying or in its queue): what a Controller sweeps for the
    /// messages no fill announced (a lost signal, a redelivery).
    async fn queue_backlog(&self) -> ServiceResult<Vec<Backlog>>;
    /// A lambda's secrets, sealed: what an executor opens with the key.
    async fn secret_sealed(&self, lambda: &str) -> ServiceResult<SealedSecrets>;
}

/// The whole Frontend: every role it plays, for those that serve or use
/// them all (a server, an executor, the dashboard's tests).
pub trait FrontendApi: ClientApi + AdminApi + ClusterApi {}

impl<T: ClientApi + AdminApi + ClusterApi + ?Sized> FrontendApi for T {}

/// Room for more tasks of one lambda on an executor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LambdaSlots {
    pub lambda: String,
    pub free: u32,
}

/// An executor's request for work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextWork {
    /// Only these lambdas, at most this many of each.
    pub slots: Vec<LambdaSlots>,
    /// At most this many tasks in all, whatever the slots.
    pub max_tasks: u32,
    /// How long to wait for the first task (long poll).
    pub wait: Duration,
}

/// The Controller: hands claimed tasks to executors.
#[async_trait]
pub trait ControllerApi: Send + Sync {
    /// Claimed tasks, highest priority first; empty when none came within
    /// the wait.
    async fn next_work(&self, request: NextWork) -> ServiceResult<Vec<ClaimedTask>>;
}

/// A running execution's change to its task's journal, as it sends it to
/// the HSC: the entries of a durability point (a call that reached outside
/// the sandbox, and every entry before it), written before the lambda sees
/// the call's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalCommit {
    pub id: String,
    /// The execution's lease: the write is refused unless it is still the
    /// task's.
    pub lease_token: i64,
    /// The lambda version the execution runs (its claim's): the first
    /// write pins the task to it.
    pub version: u32,
    pub write: JournalWrite,
    /// Where it stands among the execution's writes (see
    /// [`JournalPart`]); `None` from an executor of an earlier release.
    pub part: Option<JournalPart>,
    /// The journal's new generation, on the first write of a journal the
    /// execution discarded; `None` for every other write.
    pub generation: Option<u32>,
}

/// A page of a task's journal, answers included, as the execution that
/// replays it reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalPage {
    pub id: String,
    /// The reader's lease: refused unless it is the task's current one.
    pub lease_token: i64,
    /// The first entry wanted.
    pub from: u32,
    /// At most this many entries; the answer may hold fewer (it is cut to
    /// what one message carries), but at least one while any is left.
    pub limit: u32,
}

/// The Heartbeat & Status Controller: the only writer of execution state.
#[async_trait]
pub trait HscApi: Send + Sync {
    /// Claims enqueued tasks, each with the enqueue token of its message.
    async fn task_claim_many(
        &self,
        claims: Vec<(String, i64)>,
    ) -> ServiceResult<Vec<Result<ClaimedTask, Refusal>>>;
    /// Heartbeats running tasks; a refusal means the lease is lost.
    async fn task_heartbeat_many(
        &self,
        beats: Vec<Heartbeat>,
    ) -> ServiceResult<Vec<Result<(), Refusal>>>;
    /// Records the outcomes of executions; stale leases are refused.
    async fn task_set_result_many(
        &self,
        results: Vec<TaskResult>,
    ) -> ServiceResult<Vec<Result<TaskStatus, Refusal>>>;
    /// Writes a running execution's entries into its task's journal, in
    /// the store before it answers (a durability point); refused unless the
    /// execution still holds the task's lease. One write is one message: a
    /// larger one is sent as consecutive parts, the journal changed by the
    /// last. A message out of its turn (`commit.part`) is
    /// `FailedPrecondition`.
    async fn task_journal_write(&self, commit: JournalCommit)
    -> ServiceResult<Result<(), Refusal>>;
    /// A page of a task's journal with the answers, for the execution about
    /// to replay it; refused unless `page.lease_token` is the task's
    /// current lease and the task is claimed or running (a stale executor
    /// learns of it before it runs anything). The answer is cut to what one
    /// message carries.
    async fn task_journal_read(
        &self,
        page: JournalPage,
    ) -> ServiceResult<Result<Vec<JournalEntry>, Refusal>>;
    /// The signal a running execution waits for (the one of `read.name`
    /// after the `read.taken` its task took), `None` when it has not come;
    /// refused unless `read.lease_token` is the task's current lease and
    /// the task is claimed or running.
    async fn task_signal_read(
        &self,
        read: TaskSignalRead,
    ) -> ServiceResult<Result<Option<Vec<u8>>, Refusal>>;
    /// How the children a running execution waits for stand (a fan-in):
    /// how many are live, or how each ended once none is; refused unless
    /// `read.lease_token` is the task's current lease and the task is
    /// claimed or running. `InvalidArgument` for an id that is not a child
    /// of the task.
    async fn task_children_read(
        &self,
        read: TaskChildrenRead,
    ) -> ServiceResult<Result<ChildrenState, Refusal>>;
}
