//! Lambdas and their versions: deploys, rollbacks, compiled artifacts,
//! garbage collection, and what their tasks are doing (the overview).

use super::Millis;
use crate::LambdaConfig;

/// What every lambda's tasks are doing (`TaskStore::lambda_stats`): the
/// dashboard's overview. Counts are of tasks now, but `succeeded` and
/// `failed`, which count executions that ended since `since`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LambdaStats {
    pub lambda: String,
    /// Due and waiting to start (new, retrying or in a queue; not held,
    /// not parked, not waiting for a slot), per priority, lowest number
    /// first.
    pub ready: Vec<Depth>,
    /// Waiting for a later time: delayed, or backing off before a retry.
    pub waiting: u64,
    /// Held back by a paused gate.
    pub held: u64,
    /// Parked: waiting for a free place for their key (the lambda's
    /// concurrency per key).
    pub parked: u64,
    /// Waiting for a slot of the lambda's scheduling quota or of their
    /// key's rate.
    pub paced: u64,
    /// Suspended in a wait of their own (a durable sleep, a wait for a
    /// signal) not yet over.
    pub suspended: u64,
    /// Of those, the ones waiting for a signal.
    pub waiting_for_signal: u64,
    /// Of the suspended, those waiting for their children (a fan-in).
    pub waiting_for_children: u64,
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

/// A version of a lambda, with the tasks that still need it: its garbage
/// collection (`keep_versions`) keeps a version any such task needs.
#[derive(Debug, Clone, PartialEq)]
pub struct LambdaVersion {
    pub lambda: Lambda,
    /// Suspended tasks that resume on this version (their journal's, or
    /// the one they are pinned to): a task that sleeps for a week across
    /// a deploy resumes on the version that wrote its journal.
    pub suspended: u64,
    /// Tasks not in a final state that need this version (the suspended
    /// among them; a dead letter may be redriven).
    pub live: u64,
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

/// Deletes a lambda: its versions, the components no other lambda uses,
/// its secrets, periodic schedules, gates and every task of it (with their
/// attempts, logs and journals). Refused while it has tasks that may still
/// run (waiting, running, suspended or dead) unless `drop_tasks`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LambdaDelete {
    pub name: String,
    pub drop_tasks: bool,
}

/// What deleting a lambda deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LambdaDeleted {
    /// Its tasks, ended or not.
    pub tasks: u64,
    /// Of those, the ones that might still have run.
    pub live: u64,
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

/// The queues the Store Consumer filled after a fill generation, as a
/// Frontend heard of them: what tells a Controller which queues to poll.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueueFills {
    /// The generation to pass back to hear of the fills after these.
    pub generation: u64,
    /// Each `<lambda, priority>` filled since the generation asked about,
    /// once.
    pub queues: Vec<(String, u8)>,
    /// The generation asked about is not this Frontend's (a restart, a
    /// first call, another Frontend): fills may have been missed, and the
    /// caller should look at the backlog instead.
    pub missed: bool,
}
