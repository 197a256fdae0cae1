//! What the store keeps, and the parameters of its operations: the model
//! every role, the store and the clients share.
//!
//! Times are Unix milliseconds (`i64`), always passed in by the caller: the
//! store has no clock of its own, so tests and several processes agree on
//! what "now" is.

use std::time::Duration;

use crate::{LambdaConfig, TaskStatus};

/// Unix time in milliseconds.
pub type Millis = i64;

/// A task as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    pub id: String,
    pub lambda: String,
    pub collection: String,
    pub priority: u8,
    pub payload: Vec<u8>,
    pub status: TaskStatus,
    /// Executions started so far (the running one included).
    pub attempt: u32,
    pub max_attempts: u32,
    /// When the client wanted the task to run.
    pub scheduled_at: Millis,
    /// When the Store Consumer looks at the task next; `None` once terminal
    /// or while held by a paused gate.
    pub next_trigger_at: Option<Millis>,
    /// Held back by a paused gate; released when the gate opens.
    pub held: bool,
    pub enqueue_token: i64,
    pub lease_token: i64,
    pub created_at: Millis,
    pub enqueued_at: Option<Millis>,
    pub claimed_at: Option<Millis>,
    pub heartbeat_at: Option<Millis>,
    pub finished_at: Option<Millis>,
    /// The latest progress note of a heartbeat.
    pub progress: Option<String>,
    pub last_error: Option<String>,
    /// What the last execution logged, one record a line.
    pub log: Option<String>,
    pub output: Option<Vec<u8>>,
    pub parent_id: Option<String>,
    pub idempotency_key: Option<String>,
    /// The periodic schedule that created the task, if any.
    pub cron_id: Option<String>,
    /// The lambda version the task is pinned to; `None` runs the version
    /// current when it is claimed.
    pub version: Option<u32>,
    /// The task created with this one's output when it succeeds.
    pub continuation: Option<Continuation>,
}

/// On a task's success, a task of `lambda` with the output as its payload,
/// created in the same transaction as the success, as the task's child.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Continuation {
    pub lambda: String,
    pub collection: Option<String>,
    pub priority: Option<u8>,
}

/// A task to insert.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NewTask {
    pub lambda: String,
    /// `default` when absent.
    pub collection: Option<String>,
    /// The lambda's default priority when absent.
    pub priority: Option<u8>,
    pub payload: Vec<u8>,
    /// When to run it; now when absent.
    pub run_at: Option<Millis>,
    /// A second insert with the same key (per lambda) returns the first
    /// task instead of creating another.
    pub idempotency_key: Option<String>,
    pub parent_id: Option<String>,
    /// Run this version of the lambda, not the one current at the claim.
    pub version: Option<u32>,
    /// The parent's lease, when a running execution schedules the task:
    /// refused unless the parent still holds it (fencing).
    pub parent_lease: Option<i64>,
    pub continuation: Option<Continuation>,
}

/// Inserts tasks, all or none.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TaskInsertMany {
    pub tasks: Vec<NewTask>,
    pub now: Millis,
}

/// One inserted task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskInserted {
    pub id: String,
    /// False when an earlier task with the same idempotency key was returned.
    pub created: bool,
}

/// Filters of a task list (`TaskStore::task_list`, `FrontendApi::task_list`);
/// every filter is optional.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TaskList {
    pub lambda: Option<String>,
    /// Only tasks of these lambdas (an empty list matches none): the
    /// lambdas a caller's token may read, which the Frontend's gRPC adapter
    /// sets so that a page is full of theirs, not what is left of a page of
    /// every lambda's. Not sent over the wire: a server sets it from the
    /// caller's token.
    pub lambdas: Option<Vec<String>>,
    pub collection: Option<String>,
    pub status: Option<TaskStatus>,
    pub parent_id: Option<String>,
    /// Tasks created at or after this time.
    pub created_from: Option<Millis>,
    /// Tasks created before this time.
    pub created_before: Option<Millis>,
    /// Newest first; oldest first when false.
    pub newest_first: bool,
    /// Tasks past this one in the list's order (the last id of the previous
    /// page).
    pub after: Option<String>,
    /// At most this many (capped at 1000; 100 when zero).
    pub limit: u32,
}

/// Which tasks to count (`TaskStore::task_count`, `FrontendApi::task_count`):
/// a lambda's, optionally only one collection's or one parent's children.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TaskCount {
    pub lambda: String,
    pub collection: Option<String>,
    pub parent_id: Option<String>,
}

/// How many counted tasks are in each status; a status with none is
/// absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusCount {
    pub status: TaskStatus,
    pub count: u64,
}

/// What every lambda's tasks are doing (`TaskStore::lambda_stats`): the
/// dashboard's overview. Counts are of tasks now, but `succeeded` and
/// `failed`, which count executions that ended since `since`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LambdaStats {
    pub lambda: String,
    /// Due and waiting to start (new, retrying or in a queue; not held),
    /// per priority, lowest number first.
    pub ready: Vec<Depth>,
    /// Waiting for a later time: delayed, or backing off before a retry.
    pub waiting: u64,
    /// Held back by a paused gate.
    pub held: u64,
    /// Claimed or running.
    pub running: u64,
    pub dead: u64,
    pub succeeded: u64,
    /// Executions that failed, retriably or not, or were lost.
    pub failed: u64,
}

/// Every lambda's [`LambdaStats`] at one time of the store's clock.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Overview {
    pub now: Millis,
    pub lambdas: Vec<LambdaStats>,
}

/// The ready tasks of one priority of a lambda.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Depth {
    pub priority: u8,
    pub count: u64,
    /// When the longest-waiting of them came due.
    pub oldest_due: Millis,
}

/// The Store Consumer's poll.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskEnqueueReady {
    pub now: Millis,
    /// Tasks taken at most.
    pub limit: u32,
    /// How long an enqueued task may wait to be claimed before it is
    /// enqueued again (the queue may have lost it).
    pub enqueue_timeout: Duration,
}

/// A task the consumer must push onto its queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnqueuedTask {
    pub id: String,
    pub lambda: String,
    pub priority: u8,
    /// Must accompany the claim: a claim with an older token (a duplicate
    /// of an earlier message) is refused.
    pub enqueue_token: i64,
}

/// What one poll did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EnqueueReport {
    pub enqueued: Vec<EnqueuedTask>,
    /// Held back by a paused gate.
    pub held: u64,
    /// Ended by a drop gate.
    pub dropped: u64,
    /// Dead: their executor stopped heartbeating on their last attempt.
    pub dead: u64,
    /// Held back by their lambda's scheduling quota, each until its slot.
    pub paced: u64,
    /// When the earliest task not yet due comes due (a delayed task, a
    /// retry, a timeout, a paced slot), so the consumer can wake for it
    /// instead of waiting for its next poll. Read only when the poll did
    /// not fill its batch (a full one is followed by another at once).
    pub next_due: Option<Millis>,
}

/// Claims of enqueued tasks, each with the enqueue token it was queued with.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskClaimMany {
    pub claims: Vec<(String, i64)>,
    pub now: Millis,
    /// How long a claimed task may wait for its first heartbeat.
    pub claim_timeout: Duration,
}

/// A claimed task: what an executor needs to run it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimedTask {
    pub id: String,
    pub lambda: String,
    /// The lambda version current at the claim: the one to run.
    pub lambda_version: u32,
    pub collection: String,
    pub priority: u8,
    pub payload: Vec<u8>,
    pub attempt: u32,
    pub scheduled_at: Millis,
    /// The fencing token: heartbeats and results must carry it.
    pub lease_token: i64,
    /// The lambda's secrets as of the claim: it changes with every set or
    /// removal, so an executor knows when to read them again.
    pub secrets_version: i64,
}

/// A secret as anyone may see it: its name, never its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretInfo {
    pub name: String,
    pub updated_at: Millis,
}

/// A lambda's secrets as the store keeps them: sealed with the
/// installation's key.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SealedSecrets {
    /// Changes with every set or removal.
    pub version: i64,
    /// Each secret's name and sealed value.
    pub secrets: Vec<(String, Vec<u8>)>,
}

/// Why a claim, heartbeat or result was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No such task.
    NotFound,
    /// The task is not in a state that allows it (e.g. a claim of a task
    /// that is not enqueued, a result after completion).
    WrongState(TaskStatus),
    /// The claim carries an older enqueue token: a duplicate message.
    StaleEnqueueToken { current: i64 },
    /// The lease token is not the task's current one: another execution
    /// owns the task now.
    StaleLease { current: i64 },
    /// A gate on the task's lambda or collection is closed: the task is
    /// held in the store until the gate opens.
    Held,
}

/// Heartbeats of running tasks.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskHeartbeatMany {
    pub beats: Vec<Heartbeat>,
    pub now: Millis,
    /// How long a running task may go without a heartbeat.
    pub heartbeat_timeout: Duration,
}

/// One heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heartbeat {
    pub id: String,
    pub lease_token: i64,
    pub progress: Option<String>,
}

/// Results of executions.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSetResultMany {
    pub results: Vec<TaskResult>,
    pub now: Millis,
}

/// The result of one execution.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskResult {
    pub id: String,
    pub lease_token: i64,
    pub outcome: ResultOutcome,
    /// What the execution logged, one record a line.
    pub log: Option<String>,
}

/// How an execution ended, as far as the store cares.
#[derive(Debug, Clone, PartialEq)]
pub enum ResultOutcome {
    Success {
        output: Option<Vec<u8>>,
    },
    /// Retried after `retry_after`, or the lambda's backoff when absent;
    /// dead when the attempts are used up.
    Retriable {
        error: String,
        retry_after: Option<Duration>,
    },
    Fatal {
        error: String,
    },
}

/// A lambda and its current version.
#[derive(Debug, Clone, PartialEq)]
pub struct Lambda {
    pub name: String,
    pub version: u32,
    /// SHA-256 of the component, hex.
    pub digest: String,
    pub config: LambdaConfig,
    pub created_at: Millis,
}

/// Deploys a new version of a lambda (creating the lambda if new).
#[derive(Debug, Clone, PartialEq)]
pub struct LambdaDeploy {
    pub name: String,
    /// SHA-256 of `component`, hex; the caller computes it.
    pub digest: String,
    pub component: Vec<u8>,
    /// The component compiled by the deploying Frontend, kept beside it so
    /// executors load it instead of compiling.
    pub artifact: Option<Artifact>,
    pub config: LambdaConfig,
    pub now: Millis,
}

/// A component compiled for one engine, sealed by the process that
/// compiled it (see `waft_runtime::ArtifactKey` for the trust model).
#[derive(Clone, PartialEq, Eq)]
pub struct Artifact {
    /// The fingerprint of the engine that compiled it: artifacts load only
    /// into an engine with the same one.
    pub engine: String,
    /// The compiled code, as `wasmtime`'s `Component::serialize` wrote it.
    pub bytes: Vec<u8>,
    /// HMAC-SHA256 under the installation's artifact key of the engine, the
    /// component's digest and `bytes`.
    pub seal: Vec<u8>,
}

impl std::fmt::Debug for Artifact {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Artifact")
            .field("engine", &self.engine)
            .field("bytes", &self.bytes.len())
            .finish_non_exhaustive()
    }
}

/// Makes an earlier version of a lambda current again, as a new version
/// with its component and configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LambdaRollback {
    pub name: String,
    /// The version to restore; the one before the current when absent.
    pub to: Option<u32>,
    pub now: Millis,
}

/// Deletes a lambda's old versions and every component no version uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LambdaGc {
    pub lambda: String,
    /// Versions kept, the current one included (at least 1). Older ones go
    /// unless a task that may still run is pinned to them.
    pub keep: u32,
}

/// What a garbage collection deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GcReport {
    pub versions: u64,
    pub components: u64,
}

/// The oldest due task of a `<lambda, priority>` that has not started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backlog {
    pub lambda: String,
    pub priority: u8,
    /// When it was due.
    pub oldest_due: Millis,
}

/// Whether a gate lets tasks through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateState {
    Open,
    /// Tasks wait in the store; running ones finish.
    Paused,
    /// Tasks end as `dropped` when they come due.
    Dropped,
}

impl GateState {
    pub fn as_str(self) -> &'static str {
        match self {
            GateState::Open => "open",
            GateState::Paused => "paused",
            GateState::Dropped => "dropped",
        }
    }
}

/// A gate on a lambda, or on one collection of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gate {
    pub lambda: String,
    /// `None`: the whole lambda.
    pub collection: Option<String>,
    pub state: GateState,
    pub updated_at: Millis,
}

/// Sets a gate; opening releases the tasks it held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateSet {
    pub lambda: String,
    pub collection: Option<String>,
    pub state: GateState,
    pub now: Millis,
}

/// Which dead letters to redrive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeadSelector {
    /// These tasks; every one must be dead, or nothing is redriven.
    Ids(Vec<String>),
    /// Every dead task of a lambda (and collection).
    Filter {
        lambda: String,
        collection: Option<String>,
    },
}

/// Gives dead tasks a fresh attempt budget and makes them due now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadRedrive {
    pub selector: DeadSelector,
    /// Pin the tasks to this version of their lambda (its attempt budget
    /// too); the current version when absent.
    pub version: Option<u32>,
    pub now: Millis,
}

/// A periodic schedule: one task per occurrence.
#[derive(Debug, Clone, PartialEq)]
pub struct Cron {
    pub id: String,
    pub lambda: String,
    /// The cron expression, as given; the store does not parse it.
    pub cron: String,
    pub timezone: String,
    pub payload: Vec<u8>,
    pub collection: Option<String>,
    pub priority: Option<u8>,
    /// After downtime: run every missed occurrence (true), or only the most
    /// recent one (false).
    pub catch_up: bool,
    /// The next occurrence not yet materialised.
    pub next_at: Millis,
    pub created_at: Millis,
}

/// Materialises one occurrence of a schedule, exactly once: succeeds only if
/// the schedule's next occurrence is still `expected` (as the caller read
/// it), and moves it to `next_at` in the same transaction as the insert of
/// the task for `occurrence`. The two differ when missed occurrences are
/// skipped: `expected` is the oldest missed, `occurrence` the latest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronMaterialize {
    pub cron_id: String,
    pub expected: Millis,
    pub occurrence: Millis,
    pub next_at: Millis,
    pub now: Millis,
}

/// What materialising an occurrence did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Materialized {
    /// The occurrence's task, created now.
    Created(String),
    /// Another consumer materialised it first.
    AlreadyDone,
    /// The task was refused (its lambda's settings changed since the
    /// schedule was made: a smaller payload limit, fewer priorities); the
    /// occurrence is skipped and the schedule moved on. Why it was refused.
    Skipped(String),
}

impl Materialized {
    /// The task created now, if one was.
    pub fn created(self) -> Option<String> {
        match self {
            Materialized::Created(id) => Some(id),
            Materialized::AlreadyDone | Materialized::Skipped(_) => None,
        }
    }
}

/// One execution of a task that ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// Its number within the task's attempt budget (from 1 again after a
    /// redrive).
    pub attempt: u32,
    /// The claim's lease: unique per execution of a task, increasing.
    pub lease_token: i64,
    pub outcome: AttemptOutcome,
    pub error: Option<String>,
    /// What the execution logged, one record a line.
    pub log: Option<String>,
    /// When it was claimed.
    pub started_at: Option<Millis>,
    /// When its end was recorded.
    pub ended_at: Millis,
}

/// How an execution ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    Success,
    Retriable,
    Fatal,
    /// Its executor stopped heartbeating; the store noticed the timeout.
    Lost,
}

impl AttemptOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Success => "success",
            AttemptOutcome::Retriable => "retriable",
            AttemptOutcome::Fatal => "fatal",
            AttemptOutcome::Lost => "lost",
        }
    }
}

impl std::str::FromStr for AttemptOutcome {
    type Err = ();

    fn from_str(text: &str) -> Result<Self, ()> {
        match text {
            "success" => Ok(AttemptOutcome::Success),
            "retriable" => Ok(AttemptOutcome::Retriable),
            "fatal" => Ok(AttemptOutcome::Fatal),
            "lost" => Ok(AttemptOutcome::Lost),
            _ => Err(()),
        }
    }
}

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenRole {
    /// Everything, tokens included.
    Admin,
    /// Everything about its lambdas: deploy, schedule, read, cancel, gate,
    /// redrive, periodic schedules.
    Owner,
    /// Schedules tasks of its lambdas and reads them.
    Scheduler,
}

impl TokenRole {
    pub fn as_str(self) -> &'static str {
        match self {
            TokenRole::Admin => "admin",
            TokenRole::Owner => "owner",
            TokenRole::Scheduler => "scheduler",
        }
    }
}

impl std::str::FromStr for TokenRole {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "admin" => Ok(TokenRole::Admin),
            "owner" => Ok(TokenRole::Owner),
            "scheduler" => Ok(TokenRole::Scheduler),
            other => Err(format!(
                "unknown role {other:?}: use admin, owner or scheduler"
            )),
        }
    }
}

/// An API token, without its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub id: String,
    pub name: String,
    pub role: TokenRole,
    /// The lambdas an owner or scheduler token is limited to.
    pub lambdas: Vec<String>,
    pub created_at: Millis,
    pub revoked_at: Option<Millis>,
}

/// A token to store with the hash of its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenCreate {
    pub token: Token,
    /// SHA-256 of the secret, hex.
    pub hash: String,
}

/// A secret to store, sealed by the Frontend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretSet {
    pub lambda: String,
    pub name: String,
    pub sealed: Vec<u8>,
    pub now: Millis,
}
