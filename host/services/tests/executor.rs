//! The Executor against a Controller that hands its work out late (a slow
//! network, a stalled process): the claim is made when the request arrives,
//! so its first fence counts from the request. A task handed out after
//! that fence is not started — its claim may already have lapsed and gone
//! to another executor — while one handed out in time runs. The real
//! Frontend and HSC run over a SQLite file with the `hello` sample.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;
use waft_core::{LambdaConfig, TaskStatus};
use waft_runtime::{Allocator, Runtime, RuntimeConfig};
use waft_services::{
    Clock, ControllerApi, Executor, ExecutorConfig, Frontend, FrontendApi, HeartbeatConfig, Hsc,
    HscApi, NextWork, ServiceResult, SystemClock, Wake,
};
use waft_store::{ClaimedTask, NewTask, SqliteStore, TaskEnqueueReady, TaskInsertMany, TaskStore};

/// Claims the one queued task as soon as it is asked, and answers `delay`
/// later; empty-handed after that.
struct LateController {
    store: Arc<dyn TaskStore>,
    hsc: Arc<Hsc>,
    delay: Duration,
    handed: AtomicBool,
}

#[async_trait]
impl ControllerApi for LateController {
    async fn next_work(&self, request: NextWork) -> ServiceResult<Vec<ClaimedTask>> {
        if self.handed.swap(true, Ordering::AcqRel) {
            tokio::time::sleep(request.wait).await;
            return Ok(Vec::new());
        }
        let report = self
            .store
            .task_enqueue_ready(TaskEnqueueReady {
                now: SystemClock.now(),
                limit: 1,
                enqueue_timeout: Duration::from_secs(60),
            })
            .await
            .unwrap();
        let claims = report
            .enqueued
            .into_iter()
            .map(|task| (task.id, task.enqueue_token))
            .collect();
        let claimed = self.hsc.task_claim_many(claims).await?;
        tokio::time::sleep(self.delay).await;
        Ok(claimed.into_iter().filter_map(Result::ok).collect())
    }
}

/// Heartbeats every 100 ms, claims held 1 s: the first fence is 800 ms.
fn heartbeat() -> HeartbeatConfig {
    HeartbeatConfig {
        interval: Duration::from_millis(100),
        heartbeat_timeout: Duration::from_secs(1),
        rpc_timeout: Duration::from_millis(100),
    }
}

/// Runs an executor whose one task is handed out `delay` after it was
/// asked for; the task's status a second after the hand-out.
async fn hand_out_after(delay: Duration) -> TaskStatus {
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
    let hello = std::fs::read(waft_sample_artifacts::HELLO).unwrap();
    frontend
        .lambda_deploy("hello", hello, LambdaConfig::default())
        .await
        .unwrap();
    let id = store
        .task_insert_many(TaskInsertMany {
            tasks: vec![NewTask {
                lambda: "hello".into(),
                ..NewTask::default()
            }],
            now: clock.now(),
        })
        .await
        .unwrap()
        .remove(0)
        .id;
    let hsc = Arc::new(Hsc::new(store.clone(), clock, heartbeat()));
    let controller = Arc::new(LateController {
        store: store.clone(),
        hsc: hsc.clone(),
        delay,
        handed: AtomicBool::new(false),
    });
    let executor = Executor::new(
        runtime,
        controller,
        hsc,
        frontend,
        ExecutorConfig {
            heartbeat: heartbeat(),
            next_work_wait: Duration::from_millis(100),
            refresh: Duration::from_millis(100),
            ..ExecutorConfig::default()
        },
        None,
    )
    .unwrap();
    let stop = CancellationToken::new();
    let running = tokio::spawn(executor.run(stop.clone().cancelled_owned()));
    tokio::time::sleep(delay + Duration::from_secs(1)).await;
    let status = store.task_get(&id).await.unwrap().unwrap().status;
    stop.cancel();
    running.await.unwrap();
    status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_handed_out_in_time_runs() {
    assert_eq!(
        hand_out_after(Duration::from_millis(100)).await,
        TaskStatus::Success
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_handed_out_after_its_first_fence_is_not_started() {
    // Its claim stands until it lapses; no execution began under it.
    assert_eq!(
        hand_out_after(Duration::from_millis(1_200)).await,
        TaskStatus::Claimed
    );
}
