//! What every conformance check shares: a lambda config, and one call
//! each for the steps of a task's life, at times the check passes in.
//!
//! Each check takes a fresh, empty store. Time is passed in, never read from
//! a clock, so timeouts are tested by moving `now`.

use std::time::Duration;

use waft_core::{Backoff, ByteSize, LambdaConfig, TaskStatus};
use waft_store::{
    GateSet, GateState, Heartbeat, LambdaDeploy, Millis, NewTask, Refusal, ResultOutcome,
    TaskClaimMany, TaskEnqueueReady, TaskHeartbeatMany, TaskInsertMany, TaskResult,
    TaskSetResultMany, TaskStore,
};

pub const T0: Millis = 1_800_000_000_000;
pub const ENQUEUE_TIMEOUT: Duration = Duration::from_secs(60);
pub const CLAIM_TIMEOUT: Duration = Duration::from_secs(30);
pub const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(20);

pub fn config() -> LambdaConfig {
    LambdaConfig {
        max_attempts: 3,
        backoff: Backoff {
            base: Duration::from_secs(10),
            factor: 2.0,
            max: Duration::from_secs(600),
        },
        max_payload: ByteSize::kib(1),
        ..LambdaConfig::default()
    }
}

pub async fn deploy(store: &dyn TaskStore, name: &str) {
    deploy_with(store, name, config()).await;
}

pub async fn deploy_with(store: &dyn TaskStore, name: &str, config: LambdaConfig) {
    store
        .lambda_deploy(LambdaDeploy {
            name: name.into(),
            digest: format!("digest-of-{name}"),
            component: name.as_bytes().to_vec(),
            artifact: None,
            config,
            now: T0,
        })
        .await
        .unwrap();
}

pub fn new_task(lambda: &str) -> NewTask {
    NewTask {
        lambda: lambda.into(),
        payload: b"{}".to_vec(),
        ..NewTask::default()
    }
}

pub async fn insert(store: &dyn TaskStore, task: NewTask, now: Millis) -> String {
    store
        .task_insert_many(TaskInsertMany {
            tasks: vec![task],
            now,
        })
        .await
        .unwrap()
        .remove(0)
        .id
}

pub async fn poll(store: &dyn TaskStore, now: Millis) -> waft_store::EnqueueReport {
    store
        .task_enqueue_ready(TaskEnqueueReady {
            now,
            limit: 1000,
            enqueue_timeout: ENQUEUE_TIMEOUT,
        })
        .await
        .unwrap()
}

pub async fn claim(
    store: &dyn TaskStore,
    id: &str,
    token: i64,
    now: Millis,
) -> Result<waft_store::ClaimedTask, Refusal> {
    store
        .task_claim_many(TaskClaimMany {
            claims: vec![(id.to_owned(), token)],
            now,
            claim_timeout: CLAIM_TIMEOUT,
        })
        .await
        .unwrap()
        .remove(0)
}

pub async fn heartbeat(
    store: &dyn TaskStore,
    id: &str,
    lease: i64,
    progress: Option<&str>,
    now: Millis,
) -> Result<(), Refusal> {
    store
        .task_heartbeat_many(TaskHeartbeatMany {
            beats: vec![Heartbeat {
                id: id.into(),
                lease_token: lease,
                progress: progress.map(Into::into),
            }],
            now,
            heartbeat_timeout: HEARTBEAT_TIMEOUT,
        })
        .await
        .unwrap()
        .remove(0)
}

pub async fn finish(
    store: &dyn TaskStore,
    id: &str,
    lease: i64,
    outcome: ResultOutcome,
    now: Millis,
) -> Result<TaskStatus, Refusal> {
    store
        .task_set_result_many(TaskSetResultMany {
            results: vec![TaskResult {
                id: id.into(),
                lease_token: lease,
                outcome,
                log: Some(format!("the log of lease {lease}")),
                journal: None,
                replayed: 0,
            }],
            now,
        })
        .await
        .unwrap()
        .remove(0)
}

pub async fn status(store: &dyn TaskStore, id: &str) -> TaskStatus {
    store.task_get(id).await.unwrap().unwrap().status
}

/// Polls, claims and heartbeats one task: it is then `processing`.
pub async fn start(store: &dyn TaskStore, id: &str, now: Millis) -> i64 {
    let report = poll(store, now).await;
    let queued = report
        .enqueued
        .iter()
        .find(|t| t.id == id)
        .expect("enqueued");
    let claimed = claim(store, id, queued.enqueue_token, now).await.unwrap();
    heartbeat(store, id, claimed.lease_token, None, now)
        .await
        .unwrap();
    claimed.lease_token
}

pub fn success() -> ResultOutcome {
    ResultOutcome::Success { output: None }
}

pub fn retriable(error: &str) -> ResultOutcome {
    ResultOutcome::Retriable {
        error: error.into(),
        retry_after: None,
    }
}

/// Sets the gate of a whole lambda; how many tasks it released.
pub async fn gate(store: &dyn TaskStore, lambda: &str, state: GateState, now: i64) -> u64 {
    store
        .gate_set(GateSet {
            lambda: lambda.into(),
            collection: None,
            state,
            now,
        })
        .await
        .unwrap()
}
