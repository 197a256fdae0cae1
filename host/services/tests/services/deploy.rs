//! What a deploy hands the executors: the component compiled once, by the
//! Frontend, and word of the deploy the moment it is stored.
//!
//! An executor with the installation's key loads the sealed artifact
//! instead of compiling; one whose engine differs (a mixed-version
//! rollout) or that has no key compiles, and counts why. An executor that
//! would re-read the lambdas only once an hour, and whose `NextWork` polls
//! hold for longer than the test, still runs each lambda deployed after it
//! started, at once. The real Frontend, HSC and Executor
//! run over a SQLite file with the samples.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;
use waft_core::{LambdaConfig, TaskStatus};
use waft_runtime::{Allocator, Runtime, RuntimeConfig};
use waft_services::metrics::{CompileLabels, metrics};
use waft_services::secrets::SecretKey;
use waft_services::{
    ClientApi, Clock, ControllerApi, Executor, ExecutorConfig, Frontend, Hsc, HscApi, NextWork,
    ServiceResult, SystemClock, Wake,
};
use waft_store::{ClaimedTask, NewTask, TaskEnqueueReady, TaskInsertMany, TaskStore};

use crate::support;

/// Enqueues whatever is due when asked, and claims what the executor has
/// room for (keeping the rest for a later ask); when there is nothing to
/// hand out, looks again every few milliseconds until the poll's wait is
/// over, as a Controller's long poll holds.
struct StoreController {
    store: Arc<dyn TaskStore>,
    hsc: Arc<Hsc>,
    /// Enqueued, not yet handed out: lambda, id, enqueue token.
    pending: Mutex<Vec<(String, String, i64)>>,
}

#[async_trait]
impl ControllerApi for StoreController {
    async fn next_work(&self, request: NextWork) -> ServiceResult<Vec<ClaimedTask>> {
        let until = Instant::now() + request.wait;
        loop {
            let claimed = self.hand_out(&request).await?;
            if !claimed.is_empty() || Instant::now() >= until {
                return Ok(claimed);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl StoreController {
    /// One look for work for the poll's slots.
    async fn hand_out(&self, request: &NextWork) -> ServiceResult<Vec<ClaimedTask>> {
        let report = self
            .store
            .task_enqueue_ready(TaskEnqueueReady {
                now: SystemClock.now(),
                limit: 100,
                enqueue_timeout: Duration::from_secs(60),
            })
            .await?;
        let claims: Vec<_> = {
            let mut pending = self.pending.lock().unwrap();
            pending.extend(
                report
                    .enqueued
                    .into_iter()
                    .map(|task| (task.lambda, task.id, task.enqueue_token)),
            );
            let (served, kept) = pending
                .drain(..)
                .partition(|(lambda, _, _)| request.slots.iter().any(|s| &s.lambda == lambda));
            *pending = kept;
            served
                .into_iter()
                .map(|(_, id, token): (String, String, i64)| (id, token))
                .collect()
        };
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        let claimed = self.hsc.task_claim_many(claims).await?;
        Ok(claimed.into_iter().filter_map(Result::ok).collect())
    }
}

/// A SQLite store with the real Frontend over it, sealing artifacts with
/// the installation's key.
struct Installation {
    dir: tempfile::TempDir,
    store: Arc<dyn TaskStore>,
    clock: Arc<dyn Clock>,
    frontend: Arc<Frontend>,
    key: Arc<SecretKey>,
}

impl Installation {
    async fn new() -> Self {
        let dir = tempfile::TempDir::new().unwrap();
        let store = support::sqlite_store(&dir).await;
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let key = Arc::new(SecretKey::read_or_create(&dir.path().join("secrets.key")).unwrap());
        let frontend = Arc::new(
            Frontend::new(
                store.clone(),
                clock.clone(),
                Arc::new(runtime(true, Allocator::OnDemand)),
                Arc::new(Wake::default()),
            )
            .secrets(key.clone()),
        );
        Self {
            dir,
            store,
            clock,
            frontend,
            key,
        }
    }

    async fn deploy(&self, lambda: &str) {
        self.frontend
            .lambda_deploy(
                lambda,
                std::fs::read(waft_sample_artifacts::HELLO).unwrap(),
                LambdaConfig::default(),
            )
            .await
            .unwrap();
    }

    async fn schedule(&self, lambda: &str) -> String {
        let task = NewTask {
            lambda: lambda.into(),
            payload: br#"{"name":"Ada"}"#.to_vec(),
            ..NewTask::default()
        };
        self.store
            .task_insert_many(TaskInsertMany {
                tasks: vec![task],
                now: self.clock.now(),
            })
            .await
            .unwrap()
            .remove(0)
            .id
    }

    /// Starts an executor on `runtime`, with the installation's key or
    /// without, re-reading the lambdas every `refresh`.
    fn start_executor(
        &self,
        runtime: Runtime,
        with_key: bool,
        refresh: Duration,
    ) -> (CancellationToken, tokio::task::JoinHandle<()>) {
        let config = ExecutorConfig {
            next_work_wait: Duration::from_millis(100),
            refresh,
            ..ExecutorConfig::default()
        };
        self.start_executor_on(runtime, with_key, config)
    }

    /// Starts an executor on `runtime` with the installation's key and
    /// `config`.
    fn start_executor_with(
        &self,
        runtime: Runtime,
        config: ExecutorConfig,
    ) -> (CancellationToken, tokio::task::JoinHandle<()>) {
        self.start_executor_on(runtime, true, config)
    }

    fn start_executor_on(
        &self,
        runtime: Runtime,
        with_key: bool,
        config: ExecutorConfig,
    ) -> (CancellationToken, tokio::task::JoinHandle<()>) {
        let hsc = Arc::new(Hsc::new(
            self.store.clone(),
            self.clock.clone(),
            Default::default(),
        ));
        let controller = Arc::new(StoreController {
            store: self.store.clone(),
            hsc: hsc.clone(),
            pending: Mutex::default(),
        });
        let executor = Executor::new(
            Arc::new(runtime),
            controller,
            hsc as Arc<dyn HscApi>,
            self.frontend.clone(),
            config,
            with_key.then(|| self.key.clone()),
        )
        .unwrap();
        let stop = CancellationToken::new();
        let running = tokio::spawn(executor.run(stop.clone().cancelled_owned()));
        (stop, running)
    }

    /// Waits (generously: a loaded machine compiles slowly) for the task
    /// to end; its status.
    async fn ended(&self, id: &str) -> TaskStatus {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let task = self.frontend.task_get(id).await.unwrap();
            if task.status.is_terminal() || Instant::now() > deadline {
                return task.status;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn runtime(fuel: bool, allocator: Allocator) -> Runtime {
    Runtime::new(RuntimeConfig {
        fuel,
        allocator,
        max_instances: 8,
        ..RuntimeConfig::default()
    })
    .unwrap()
}

fn compiles(lambda: &str, reason: &'static str) -> u64 {
    metrics()
        .local_compiles
        .get_or_create(&CompileLabels {
            lambda: lambda.into(),
            reason,
        })
        .get()
}

/// Every reason an executor may compile for itself, summed.
fn all_compiles(lambda: &str) -> u64 {
    ["no_artifact", "refused", "no_key", "unavailable"]
        .into_iter()
        .map(|reason| compiles(lambda, reason))
        .sum()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_executor_loads_the_artifact_the_frontend_compiled() {
    let installation = Installation::new().await;
    installation.deploy("compiled-once").await;
    // The executor's engine is pooled, the Frontend's is not: artifacts
    // travel between them all the same.
    let executor_runtime = runtime(true, Allocator::Auto);
    let lambda = installation
        .frontend
        .lambda_get("compiled-once", None)
        .await
        .unwrap();
    let stored = installation
        .store
        .artifact_get(&lambda.digest, executor_runtime.fingerprint())
        .await
        .unwrap();
    assert!(
        stored.is_some(),
        "the deploy stored no artifact for the executors' engine"
    );

    let (stop, running) =
        installation.start_executor(executor_runtime, true, Duration::from_millis(100));
    let id = installation.schedule("compiled-once").await;
    assert_eq!(installation.ended(&id).await, TaskStatus::Success);
    assert_eq!(
        all_compiles("compiled-once"),
        0,
        "the executor compiled instead of loading"
    );
    stop.cancel();
    running.await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_executor_of_another_engine_or_without_the_key_compiles_and_counts_it() {
    let installation = Installation::new().await;
    installation.deploy("other-engine").await;
    installation.deploy("keyless").await;

    // Fuel off: another fingerprint, as after an upgrade of some executors.
    let (stop, running) = installation.start_executor(
        runtime(false, Allocator::OnDemand),
        true,
        Duration::from_millis(100),
    );
    let id = installation.schedule("other-engine").await;
    assert_eq!(installation.ended(&id).await, TaskStatus::Success);
    assert_eq!(compiles("other-engine", "no_artifact"), 1);
    stop.cancel();
    running.await.unwrap();

    let (stop, running) = installation.start_executor(
        runtime(true, Allocator::OnDemand),
        false,
        Duration::from_millis(100),
    );
    let id = installation.schedule("keyless").await;
    assert_eq!(installation.ended(&id).await, TaskStatus::Success);
    assert_eq!(compiles("keyless", "no_key"), 1);
    stop.cancel();
    running.await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tampered_artifact_is_refused_and_the_component_compiled() {
    let installation = Installation::new().await;
    installation.deploy("tampered").await;
    let executor_runtime = runtime(true, Allocator::OnDemand);
    let lambda = installation
        .frontend
        .lambda_get("tampered", None)
        .await
        .unwrap();
    // Someone with the database's password rewrites the compiled code.
    let database = installation.dir.path().join(support::DATABASE);
    let pool = sqlx_sqlite(&database).await;
    sqlx::query("UPDATE artifacts SET bytes = zeroblob(length(bytes)) WHERE digest = $1")
        .bind(&lambda.digest)
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;

    let (stop, running) =
        installation.start_executor(executor_runtime, true, Duration::from_millis(100));
    let id = installation.schedule("tampered").await;
    assert_eq!(installation.ended(&id).await, TaskStatus::Success);
    assert_eq!(compiles("tampered", "refused"), 1);
    stop.cancel();
    running.await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_executor_learns_of_a_deploy_at_once_not_at_its_refresh() {
    let installation = Installation::new().await;
    installation.deploy("first").await;
    // Re-reading the lambdas once an hour: only the deploy's signal can
    // tell it of `later` within this test.
    let (stop, running) = installation.start_executor(
        runtime(true, Allocator::OnDemand),
        true,
        Duration::from_secs(3600),
    );
    let id = installation.schedule("first").await;
    assert_eq!(installation.ended(&id).await, TaskStatus::Success);

    installation.deploy("later").await;
    let id = installation.schedule("later").await;
    assert_eq!(installation.ended(&id).await, TaskStatus::Success);
    stop.cancel();
    running.await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_executor_learns_of_every_deploy_at_once() {
    const LAMBDAS: usize = 8;
    let installation = Installation::new().await;
    // Long polls that hold far longer than the test, and a refresh once an
    // hour: only the deploys' signal, and a poll sent for each new lambda,
    // can start their tasks in time.
    let (stop, running) = installation.start_executor_with(
        runtime(true, Allocator::OnDemand),
        ExecutorConfig {
            next_work_wait: Duration::from_secs(25),
            refresh: Duration::from_secs(3600),
            ..ExecutorConfig::default()
        },
    );
    let mut slow = Vec::new();
    for n in 1..=LAMBDAS {
        let name = format!("deployed-{n}");
        installation.deploy(&name).await;
        let scheduled = Instant::now();
        let id = installation.schedule(&name).await;
        assert_eq!(installation.ended(&id).await, TaskStatus::Success);
        // A loaded machine included; waiting for a poll's end takes 25 s.
        if scheduled.elapsed() > Duration::from_secs(3) {
            slow.push(format!("{name} took {:?}", scheduled.elapsed()));
        }
    }
    assert!(
        slow.is_empty(),
        "tasks of lambdas just deployed waited for a poll to end: {}",
        slow.join(", ")
    );
    stop.cancel();
    running.await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_name_deployed_again_runs_its_own_component() {
    let installation = Installation::new().await;
    installation.deploy("reused").await;
    let (stop, running) = installation.start_executor(
        runtime(true, Allocator::OnDemand),
        true,
        Duration::from_millis(100),
    );
    let id = installation.schedule("reused").await;
    assert_eq!(installation.ended(&id).await, TaskStatus::Success);

    // Deleted, and another component deployed under the name: its tasks
    // run it, not what the executor loaded of the deleted one.
    installation
        .frontend
        .lambda_delete("reused", true)
        .await
        .unwrap();
    installation
        .frontend
        .lambda_deploy(
            "reused",
            std::fs::read(waft_sample_artifacts::FATAL).unwrap(),
            LambdaConfig::default(),
        )
        .await
        .unwrap();
    let id = installation.schedule("reused").await;
    assert_eq!(
        installation.ended(&id).await,
        TaskStatus::FatalFailure,
        "the deleted lambda's component ran"
    );
    stop.cancel();
    running.await.unwrap();
}

async fn sqlx_sqlite(path: &std::path::Path) -> sqlx::SqlitePool {
    sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(sqlx::sqlite::SqliteConnectOptions::new().filename(path))
        .await
        .unwrap()
}
