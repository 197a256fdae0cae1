//! Set-up shared by the tests of Waft's services, in this process:
//!
//! - [`sqlite_store`]: a SQLite store in a temporary directory;
//! - [`on_demand_runtime`]: a runtime that allocates its instances on
//!   demand (no pool to reserve on a busy machine);
//! - [`store_lambda`] and [`enqueue_ready`]: a lambda and due tasks as the
//!   HSC and the Controller see them, with no component and no queue;
//! - [`Installation`]: the real Frontend over those, one lambda deployed,
//!   and executors started beside it;
//! - [`EagerController`]: a Controller double that hands out every due
//!   task it can claim.

// The test modules each use only some of it.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;
use waft_core::LambdaConfig;
use waft_runtime::{Allocator, Runtime, RuntimeConfig};
use waft_services::{
    ClientApi, Clock, ControllerApi, Executor, ExecutorConfig, Frontend, FrontendApi,
    HeartbeatConfig, Hsc, HscApi, NextWork, ServiceResult, SystemClock, Wake,
};
use waft_store::{
    ClaimedTask, LambdaDeploy, NewTask, SqliteStore, TaskEnqueueReady, TaskInsertMany, TaskStore,
};

/// The store's file in its directory.
pub const DATABASE: &str = "waft.db";

/// A SQLite store at [`DATABASE`] in `dir`.
pub async fn sqlite_store(dir: &tempfile::TempDir) -> Arc<dyn TaskStore> {
    Arc::new(SqliteStore::open(&dir.path().join(DATABASE)).await.unwrap())
}

/// A runtime that allocates its instances on demand.
pub fn on_demand_runtime() -> Runtime {
    Runtime::new(RuntimeConfig {
        allocator: Allocator::OnDemand,
        ..RuntimeConfig::default()
    })
    .unwrap()
}

/// Stores lambda `name` with `config` and no component: enough for the
/// HSC and the Controller, which never run it.
pub async fn store_lambda(store: &dyn TaskStore, name: &str, config: LambdaConfig) {
    store
        .lambda_deploy(LambdaDeploy {
            name: name.into(),
            digest: "d".into(),
            component: Vec::new(),
            artifact: None,
            config,
            now: SystemClock.now(),
        })
        .await
        .unwrap();
}

/// Enqueues up to `limit` due tasks, as the Store Consumer does (with no
/// queue behind it); the claims that take them.
pub async fn enqueue_ready(
    store: &dyn TaskStore,
    limit: u32,
) -> waft_store::Result<Vec<(String, i64)>> {
    let report = store
        .task_enqueue_ready(TaskEnqueueReady {
            now: SystemClock.now(),
            limit,
            enqueue_timeout: Duration::from_secs(60),
        })
        .await?;
    Ok(report
        .enqueued
        .into_iter()
        .map(|task| (task.id, task.enqueue_token))
        .collect())
}

/// `config` with the grant the `greedy` sample needs to deploy: it imports
/// outbound HTTP for an attack these tests do not use. Nothing listens
/// there.
pub fn granted(mut config: LambdaConfig) -> LambdaConfig {
    config.grants.outbound = vec!["http://127.0.0.1:9".parse().unwrap()];
    config
}

/// Hands out every due task it can claim, up to what the executor asks for.
pub struct EagerController {
    pub store: Arc<dyn TaskStore>,
    pub hsc: Arc<Hsc>,
}

#[async_trait]
impl ControllerApi for EagerController {
    async fn next_work(&self, request: NextWork) -> ServiceResult<Vec<ClaimedTask>> {
        let claims = enqueue_ready(&*self.store, request.max_tasks).await?;
        if claims.is_empty() {
            // A long poll with nothing to hand out, shortened.
            tokio::time::sleep(request.wait.min(Duration::from_millis(50))).await;
            return Ok(Vec::new());
        }
        let claimed = self.hsc.task_claim_many(claims).await?;
        Ok(claimed.into_iter().filter_map(Result::ok).collect())
    }
}

/// A SQLite store with the real Frontend over it, one lambda deployed.
pub struct Installation {
    _dir: tempfile::TempDir,
    pub store: Arc<dyn TaskStore>,
    pub clock: Arc<dyn Clock>,
    pub runtime: Arc<Runtime>,
    pub frontend: Arc<Frontend>,
}

impl Installation {
    /// `lambda`, the sample at `wasm`, deployed with `config`.
    pub async fn with(lambda: &str, wasm: &str, config: LambdaConfig) -> Self {
        let dir = tempfile::TempDir::new().unwrap();
        let store = sqlite_store(&dir).await;
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let runtime = Arc::new(on_demand_runtime());
        let frontend = Arc::new(Frontend::new(
            store.clone(),
            clock.clone(),
            runtime.clone(),
            Arc::new(Wake::default()),
        ));
        frontend
            .lambda_deploy(lambda, std::fs::read(wasm).unwrap(), config)
            .await
            .unwrap();
        Self {
            _dir: dir,
            store,
            clock,
            runtime,
            frontend,
        }
    }

    /// Stores one task of `lambda` per payload, due now; their ids.
    pub async fn insert(&self, lambda: &str, payloads: Vec<Vec<u8>>) -> Vec<String> {
        let tasks = payloads
            .into_iter()
            .map(|payload| NewTask {
                lambda: lambda.into(),
                payload,
                ..NewTask::default()
            })
            .collect();
        self.store
            .task_insert_many(TaskInsertMany {
                tasks,
                now: self.clock.now(),
            })
            .await
            .unwrap()
            .into_iter()
            .map(|task| task.id)
            .collect()
    }

    /// The real HSC over the store.
    pub fn hsc(&self, heartbeat: HeartbeatConfig) -> Arc<Hsc> {
        Arc::new(Hsc::new(self.store.clone(), self.clock.clone(), heartbeat))
    }

    /// Starts an executor with `config`, without the installation's key;
    /// cancel the token to stop it.
    pub fn start_executor(
        &self,
        controller: Arc<dyn ControllerApi>,
        hsc: Arc<dyn HscApi>,
        config: ExecutorConfig,
    ) -> (CancellationToken, tokio::task::JoinHandle<()>) {
        let frontend: Arc<dyn FrontendApi> = self.frontend.clone();
        let executor = Executor::new(
            self.runtime.clone(),
            controller,
            hsc,
            frontend,
            config,
            None,
        )
        .unwrap();
        let stop = CancellationToken::new();
        let running = tokio::spawn(executor.run(stop.clone().cancelled_owned()));
        (stop, running)
    }
}
