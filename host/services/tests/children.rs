//! The cap on the children one execution may schedule, with a real
//! Executor running the `greedy` sample over the real Frontend and HSC on a
//! SQLite file. A lambda that schedules children in a loop (or schedules
//! itself) would otherwise fill the shared store at the speed of its loop:
//! past the cap each child is refused, the lambda hears it as an error it
//! can act on, and the task's log says why.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;
use waft_core::{LambdaConfig, TaskStatus};
use waft_runtime::{Allocator, Runtime, RuntimeConfig};
use waft_services::{
    Clock, ControllerApi, Executor, ExecutorConfig, Frontend, FrontendApi, HeartbeatConfig, Hsc,
    HscApi, NextWork, ServiceResult, SystemClock, Wake,
};
use waft_store::{
    ClaimedTask, NewTask, SqliteStore, Task, TaskEnqueueReady, TaskInsertMany, TaskStore,
};

/// Hands out every due task it can claim, up to what the executor asks for.
struct EagerController {
    store: Arc<dyn TaskStore>,
    hsc: Arc<Hsc>,
}

#[async_trait]
impl ControllerApi for EagerController {
    async fn next_work(&self, request: NextWork) -> ServiceResult<Vec<ClaimedTask>> {
        let report = self
            .store
            .task_enqueue_ready(TaskEnqueueReady {
                now: SystemClock.now(),
                limit: request.max_tasks,
                enqueue_timeout: Duration::from_secs(60),
            })
            .await?;
        if report.enqueued.is_empty() {
            // A long poll with nothing to hand out, shortened.
            tokio::time::sleep(request.wait.min(Duration::from_millis(50))).await;
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

/// Generous: the first task loads its lambda, which a debug build on a busy
/// machine may take seconds over. A passing test never waits so long.
const WITHIN: Duration = Duration::from_secs(60);

/// The real Frontend over a SQLite file, with `greedy` deployed.
struct Installation {
    _dir: tempfile::TempDir,
    store: Arc<dyn TaskStore>,
    clock: Arc<dyn Clock>,
    runtime: Arc<Runtime>,
    frontend: Arc<Frontend>,
}

impl Installation {
    async fn new() -> Self {
        let dir = tempfile::TempDir::new().unwrap();
        let store: Arc<dyn TaskStore> = Arc::new(
            SqliteStore::open(&dir.path().join("waft.db"))
                .await
                .unwrap(),
        );
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let runtime = Arc::new(
            Runtime::new(RuntimeConfig {
                allocator: Allocator::OnDemand,
                ..RuntimeConfig::default()
            })
            .unwrap(),
        );
        let frontend = Arc::new(Frontend::new(
            store.clone(),
            clock.clone(),
            runtime.clone(),
            Arc::new(Wake::default()),
        ));
        let component = std::fs::read(waft_sample_artifacts::GREEDY).unwrap();
        // It imports outbound HTTP for another attack, which needs a grant
        // to deploy; nothing listens there, and this attack sends nothing.
        let mut config = LambdaConfig::default();
        config.grants.outbound = vec!["http://127.0.0.1:9".parse().unwrap()];
        frontend
            .lambda_deploy("greedy", component, config)
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

    /// Stores a task of `greedy` with `payload`, due now; its id.
    async fn insert(&self, payload: serde_json::Value) -> String {
        let task = NewTask {
            lambda: "greedy".into(),
            payload: payload.to_string().into_bytes(),
            ..NewTask::default()
        };
        let now = self.clock.now();
        let inserted = self
            .store
            .task_insert_many(TaskInsertMany {
                tasks: vec![task],
                now,
            })
            .await
            .unwrap();
        inserted[0].id.clone()
    }

    /// Runs an executor allowing `cap` children per execution until task
    /// `id` ended; the task then, and its children.
    async fn run_until_ended(&self, id: &str, cap: usize) -> (Task, Vec<Task>) {
        let hsc = Arc::new(Hsc::new(
            self.store.clone(),
            self.clock.clone(),
            HeartbeatConfig::default(),
        ));
        let controller = Arc::new(EagerController {
            store: self.store.clone(),
            hsc: hsc.clone(),
        });
        let config = ExecutorConfig {
            max_children: cap,
            next_work_wait: Duration::from_millis(100),
            ..ExecutorConfig::default()
        };
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
        let deadline = Instant::now() + WITHIN;
        let task = loop {
            let task = self.store.task_get(id).await.unwrap().unwrap();
            if task.status.is_terminal() {
                break task;
            }
            assert!(Instant::now() < deadline, "the task did not end: {task:#?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        stop.cancel();
        running.await.unwrap();
        let children = self
            .store
            .task_list(waft_store::TaskList {
                parent_id: Some(id.to_owned()),
                ..Default::default()
            })
            .await
            .unwrap();
        (task, children)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execution_schedules_children_up_to_the_cap_and_no_more() {
    const CAP: usize = 3;
    let installation = Installation::new().await;
    let payload = serde_json::json!({"attack": "children", "count": CAP + 1});
    let id = installation.insert(payload).await;
    let (parent, children) = installation.run_until_ended(&id, CAP).await;
    let output = String::from_utf8_lossy(parent.output.as_deref().unwrap_or_default());
    let log = parent.log.clone().unwrap_or_default();
    assert_eq!(
        (parent.status, output.as_ref()),
        (TaskStatus::Success, format!(r#"{{"done":{CAP}}}"#).as_str()),
        "{:?}, log:\n{log}",
        parent.last_error
    );
    assert_eq!(children.len(), CAP);
    assert!(
        log.contains("refused to schedule a child") && log.contains("executor.max_children"),
        "the log says nothing of the cap:\n{log}"
    );
}
