//! The Executor: runs claimed tasks in the sandbox and reports how they
//! ended.
//!
//! It asks its Controller for work only for the lambdas it has room for
//! (each lambda's `concurrency`, and `max_tasks` in all), runs every task in
//! its own instance under the limits of the lambda version the task was
//! claimed with (loading a new version as soon as the Frontend reports its
//! deploy, from the artifact the Frontend compiled, without a restart),
//! and while a task runs the heartbeat watchdog keeps its lease alive — or
//! stops the instance when the lease is lost or three heartbeats in a row
//! fail. A stopped execution reports nothing: the store re-enqueues the task
//! after the heartbeat timeout, by which time the instance is long gone.
//!
//! Results are batched: every result ready when the reporter is free goes
//! to the HSC in one call.
//!
//! A durable task's journal is read whole through the HSC before its
//! execution starts (when its claim counts entries), replayed by the
//! runtime, written through the HSC at each durability point, and its tail
//! goes with the result (`durable`).
//!
//! Here: the run loop, slot accounting with the polls out (`slots`), and
//! each execution's life. Beside it: the Executor's settings (`config`),
//! what an execution reaches outside its instance (`host`), its task's
//! journal (`durable`), the account it gives of its start and end
//! (`records`), what it reports of how it ended (`outcome`, the policy),
//! the batched delivery of results (`reporter`), and loading lambda
//! versions (`load`) into a bounded set (`versions`).

mod children;
mod commit;
mod config;
mod durable;
mod generation;
mod heartbeats;
mod host;
mod load;
mod outcome;
mod records;
mod reporter;
mod secrets;
mod slots;
mod versions;
mod waits;
mod work;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;
use tracing::Instrument as _;
use waft_runtime::{Execution, KillSwitch, Outcome, PreparedLambda, Runtime, Sandbox, TaskInput};
use waft_store::{ClaimedTask, Lambda, TaskResult};

pub use config::ExecutorConfig;
pub use outcome::render_log;

use self::durable::{JournalFailure, JournalLink};
use self::heartbeats::BatchedHeartbeats;
use self::host::ExecutionHost;
use self::records::{record_outcome, reported};
use self::secrets::Secrets;
use self::slots::Reserved;
use self::versions::Versions;
use crate::journal::ExecutionJournal;
use crate::secrets::SecretKey;
use crate::{ControllerApi, FrontendApi, HeartbeatSink, HscApi, LambdaSlots, Watched, lock, watch};
use crate::{metrics, spans};

/// A lambda version ready to run.
struct Loaded {
    prepared: PreparedLambda,
    /// Its limits and grants, as each execution runs under them.
    sandbox: Sandbox,
}

/// The Executor role.
pub struct Executor {
    runtime: Arc<Runtime>,
    controller: Arc<dyn ControllerApi>,
    hsc: Arc<dyn HscApi>,
    frontend: Arc<dyn FrontendApi>,
    config: ExecutorConfig,
    journal: Option<ExecutionJournal>,
    versions: Versions<Arc<Loaded>>,
    /// Checks the seals of compiled artifacts; none: compile every version.
    artifact_key: Option<Arc<SecretKey>>,
    /// The lambdas' secrets, opened.
    secrets: Secrets,
    /// Every execution's heartbeats, batched.
    heartbeats: Arc<BatchedHeartbeats>,
    /// Running tasks per lambda.
    running: Mutex<HashMap<String, usize>>,
    running_total: AtomicUsize,
    /// A task ended: there is room again.
    freed: Notify,
    /// A refresh of the lambdas ended.
    refreshed_list: Arc<Notify>,
    /// The Frontend reported a deploy or rollback.
    lambdas_changed: Arc<Notify>,
}

impl Executor {
    /// An Executor running tasks from `controller` in `runtime`, reporting to
    /// `hsc`, loading lambdas and scheduling child tasks through `frontend`,
    /// opening the lambdas' secrets with `secret_key`. Fails only when the
    /// journal cannot be opened.
    pub fn new(
        runtime: Arc<Runtime>,
        controller: Arc<dyn ControllerApi>,
        hsc: Arc<dyn HscApi>,
        frontend: Arc<dyn FrontendApi>,
        config: ExecutorConfig,
        secret_key: Option<Arc<SecretKey>>,
    ) -> std::io::Result<Arc<Self>> {
        let journal = match &config.journal {
            Some(path) => Some(ExecutionJournal::open(path).map_err(|e| {
                std::io::Error::new(e.kind(), format!("cannot open {}: {e}", path.display()))
            })?),
            None => None,
        };
        let heartbeats = Arc::new(BatchedHeartbeats::new(
            hsc.clone(),
            config.heartbeat.rpc_timeout,
        ));
        Ok(Arc::new(Self {
            runtime,
            controller,
            hsc,
            frontend,
            journal,
            versions: Versions::new(config.loaded_versions),
            config,
            artifact_key: secret_key.clone(),
            secrets: Secrets::new(secret_key),
            heartbeats,
            running: Mutex::default(),
            running_total: AtomicUsize::new(0),
            freed: Notify::new(),
            refreshed_list: Arc::new(Notify::new()),
            lambdas_changed: Arc::new(Notify::new()),
        }))
    }

    /// Tasks running now.
    pub fn running(&self) -> usize {
        self.running_total.load(Ordering::Acquire)
    }

    /// Room for each served lambda now, beyond what running tasks and
    /// outstanding polls hold, and the most one poll may ask for: half the
    /// free room (at least one), so a slot freed while a poll waits can
    /// always be asked for by another.
    fn slots(&self, lambdas: &[Lambda], reserved: &Reserved) -> (Vec<LambdaSlots>, u32) {
        let total_free = self
            .config
            .max_tasks
            .saturating_sub(self.running() + reserved.total());
        if total_free == 0 {
            return (Vec::new(), 0);
        }
        let max_tasks = total_free.div_ceil(2);
        let running = lock(&self.running);
        let slots = lambdas
            .iter()
            .filter(|l| self.config.lambdas.is_empty() || self.config.lambdas.contains(&l.name))
            .filter_map(|lambda| {
                let busy =
                    running.get(&lambda.name).copied().unwrap_or(0) + reserved.of(&lambda.name);
                let free = (lambda.config.concurrency as usize)
                    .saturating_sub(busy)
                    .min(max_tasks);
                (free > 0).then(|| LambdaSlots {
                    lambda: lambda.name.clone(),
                    free: u32::try_from(free).unwrap_or(u32::MAX),
                })
            })
            .collect();
        (slots, u32::try_from(max_tasks).unwrap_or(u32::MAX))
    }

    /// Starts a task whose `NextWork` was sent at `asked`: its claim, made
    /// after that, holds at least
    /// [`HeartbeatConfig::first_fence`](crate::HeartbeatConfig::first_fence)
    /// from then.
    fn start(
        self: &Arc<Self>,
        task: ClaimedTask,
        asked: std::time::Instant,
        results: &mpsc::UnboundedSender<TaskResult>,
        kills: &Arc<Mutex<HashMap<(String, i64), KillSwitch>>>,
    ) {
        *lock(&self.running).entry(task.lambda.clone()).or_default() += 1;
        self.running_total.fetch_add(1, Ordering::AcqRel);
        let kill = KillSwitch::new();
        // The instance stops itself once the claim may have lapsed, even if
        // this process is too starved to run the watchdog meanwhile.
        kill.fence_at(asked + self.config.heartbeat.first_fence());
        let key = (task.id.clone(), task.lease_token);
        lock(kills).insert(key.clone(), kill.clone());
        let this = self.clone();
        let results = results.clone();
        let kills = kills.clone();
        let span = spans::execute(
            &task.id,
            &task.lambda,
            task.lambda_version,
            task.attempt,
            task.trace.as_ref(),
        );
        tokio::spawn(async move {
            let lambda = task.lambda.clone();
            let result = this.execute(task, kill).instrument(span.clone()).await;
            record_outcome(&span, result.as_ref());
            drop(span);
            if let Some(result) = result {
                let _ = results.send(result);
            }
            lock(&kills).remove(&key);
            let mut running = lock(&this.running);
            if let Some(count) = running.get_mut(&lambda) {
                *count = count.saturating_sub(1);
                // Nothing kept of a lambda with nothing running (it may be
                // deleted for good).
                if *count == 0 {
                    running.remove(&lambda);
                }
            }
            drop(running);
            this.running_total.fetch_sub(1, Ordering::AcqRel);
            // One stored permit: a wake-up is never lost, even when nobody
            // waits yet.
            this.freed.notify_one();
        });
    }

    /// Runs one task under its watchdog; the result to report, if any.
    async fn execute(&self, task: ClaimedTask, kill: KillSwitch) -> Option<TaskResult> {
        let host = Arc::new(ExecutionHost {
            frontend: self.frontend.clone(),
            hsc: self.hsc.clone(),
            task_id: task.id.clone(),
            lease_token: task.lease_token,
            version: task.lambda_version,
            kill: kill.clone(),
            progress: Mutex::new(None),
            max_children: self.config.max_children,
            journal_end: AtomicU32::new(task.journal_len),
            journal_sent: AtomicU32::new(0),
            journal_patience: self.config.heartbeat.heartbeat_timeout,
            trace: waft_telemetry::context_of(&tracing::Span::current()),
            children: Default::default(),
            journal_generation: AtomicU32::new(task.journal_generation),
        });
        let sink: Arc<dyn HeartbeatSink> = self.heartbeats.clone();
        let (done, finished) = tokio::sync::oneshot::channel::<()>();
        let execution = async {
            let execution = self.run_task(&task, host.clone(), &kill).await;
            let _ = done.send(());
            execution
        };
        let watchdog = watch(
            sink,
            Watched {
                task_id: &task.id,
                lambda: &task.lambda,
                lease_token: task.lease_token,
            },
            self.config.heartbeat,
            &kill,
            || lock(&host.progress).clone(),
            async {
                let _ = finished.await;
            },
        );
        if kill.is_killed() {
            // The claim may have lapsed before the task could start (a
            // starved or stalled executor): another executor may hold it now.
            tracing::warn!(task = %task.id, lease = task.lease_token, "claim too old to start; not running it");
            metrics::metrics()
                .self_terminations
                .get_or_create(&metrics::lambda(&task.lambda))
                .inc();
            return None;
        }
        self.note_started(&task);
        let (execution, watched) = tokio::select! {
            ran = async { tokio::join!(execution, watchdog) } => ran,
            never = host.write_children_when_due() => match never {},
        };
        self.note_ended(&task, &execution, &watched);
        let journal_end = host.journal_end();
        let result = reported(task, execution, watched, journal_end)?;
        host.carried(result).await
    }

    async fn run_task(
        &self,
        task: &ClaimedTask,
        host: Arc<ExecutionHost>,
        kill: &KillSwitch,
    ) -> Execution {
        // The claim's version: a task with a journal keeps the version that
        // wrote it (the store pins it).
        let loaded = match self.load(&task.lambda, task.lambda_version).await {
            Ok(loaded) => loaded,
            Err(message) => return Execution::host_error(message),
        };
        let journal = match self.read_journal(task, kill).await {
            Ok(journal) => journal,
            Err(execution) => return *execution,
        };
        let input = TaskInput {
            id: task.id.clone(),
            lambda: task.lambda.clone(),
            collection: task.collection.clone(),
            priority: task.priority,
            attempt: task.attempt,
            scheduled_at: UNIX_EPOCH
                + Duration::from_millis(u64::try_from(task.scheduled_at).unwrap_or(0)),
            payload: task.payload.clone(),
            journal,
        };
        let opened = self
            .secrets
            .of(self.frontend.as_ref(), &task.lambda, task.secrets_version)
            .await;
        let sandbox = match opened {
            Ok(secrets) if secrets.is_empty() => loaded.sandbox.clone(),
            Ok(secrets) => Sandbox {
                secrets,
                ..loaded.sandbox.clone()
            },
            Err(message) => return Execution::host_error(message),
        };
        loaded
            .prepared
            .run_on_guest_threads(input, &sandbox, host, kill)
            .await
    }

    /// The task's journal, read whole before its execution replays it;
    /// when it cannot be, how the execution ends: stopped (reporting
    /// nothing) when the lease is gone, a host error otherwise.
    async fn read_journal(
        &self,
        task: &ClaimedTask,
        kill: &KillSwitch,
    ) -> Result<Vec<waft_store::JournalEntry>, Box<Execution>> {
        if task.journal_len == 0 {
            return Ok(Vec::new());
        }
        let link = JournalLink {
            hsc: self.hsc.as_ref(),
            kill,
            patience: self.config.heartbeat.heartbeat_timeout,
        };
        link.read(task).await.map_err(|failure| {
            Box::new(match failure {
                JournalFailure::LeaseLost(reason) => {
                    kill.kill(reason.clone());
                    Execution {
                        outcome: Outcome::Killed { reason },
                        ..Execution::host_error(String::new())
                    }
                }
                JournalFailure::Failed(message) => {
                    Execution::host_error(format!("cannot read the task's journal: {message}"))
                }
            })
        })
    }

    /// Waits for running tasks within the grace period, then stops the rest.
    async fn drain(&self, kills: &Mutex<HashMap<(String, i64), KillSwitch>>) {
        let deadline = Instant::now() + self.config.shutdown_grace;
        while self.running() > 0 {
            let freed = self.freed.notified();
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                break;
            }
        }
        let left: Vec<KillSwitch> = lock(kills).values().cloned().collect();
        if !left.is_empty() {
            tracing::warn!(
                tasks = left.len(),
                "stopping tasks still running at shutdown; they will run again"
            );
        }
        for kill in left {
            kill.kill("the executor is shutting down");
        }
        while self.running() > 0 {
            self.freed.notified().await;
        }
    }
}
