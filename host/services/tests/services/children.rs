//! The cap on the children one execution may schedule, with a real
//! Executor running the `greedy` sample over the real Frontend and HSC on a
//! SQLite file. A lambda that schedules children in a loop (or schedules
//! itself) would otherwise fill the shared store at the speed of its loop:
//! past the cap each child is refused, the lambda hears it as an error it
//! can act on, and the task's log says why.

use std::sync::Arc;
use std::time::{Duration, Instant};

use waft_core::{LambdaConfig, TaskStatus};
use waft_services::{ExecutorConfig, HeartbeatConfig};
use waft_store::Task;

use crate::support;
use crate::support::{EagerController, Installation};

/// Generous: the first task loads its lambda, which a debug build on a busy
/// machine may take seconds over. A passing test never waits so long.
const WITHIN: Duration = Duration::from_secs(60);

/// The real Frontend over a SQLite file, with `greedy` deployed.
async fn installation() -> Installation {
    let config = support::granted(LambdaConfig::default());
    Installation::with("greedy", waft_sample_artifacts::GREEDY, config).await
}

/// Stores a task of `greedy` with `payload`, due now; its id.
async fn insert(installation: &Installation, payload: serde_json::Value) -> String {
    let payload = payload.to_string().into_bytes();
    installation.insert("greedy", vec![payload]).await.remove(0)
}

/// Runs an executor allowing `cap` children per execution until task `id`
/// ended; the task then, and its children.
async fn run_until_ended(installation: &Installation, id: &str, cap: usize) -> (Task, Vec<Task>) {
    let hsc = installation.hsc(HeartbeatConfig::default());
    let controller = Arc::new(EagerController {
        store: installation.store.clone(),
        hsc: hsc.clone(),
    });
    let config = ExecutorConfig {
        max_children: cap,
        next_work_wait: Duration::from_millis(100),
        ..ExecutorConfig::default()
    };
    let (stop, running) = installation.start_executor(controller, hsc, config);
    let deadline = Instant::now() + WITHIN;
    let task = loop {
        let task = installation.store.task_get(id).await.unwrap().unwrap();
        if task.status.is_terminal() {
            break task;
        }
        assert!(Instant::now() < deadline, "the task did not end: {task:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    stop.cancel();
    running.await.unwrap();
    let children = installation
        .store
        .task_list(waft_store::TaskList {
            parent_id: Some(id.to_owned()),
            ..Default::default()
        })
        .await
        .unwrap();
    (task, children)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execution_schedules_children_up_to_the_cap_and_no_more() {
    const CAP: usize = 3;
    let installation = installation().await;
    let payload = serde_json::json!({"attack": "children", "count": CAP + 1});
    let id = insert(&installation, payload).await;
    let (parent, children) = run_until_ended(&installation, &id, CAP).await;
    let output = String::from_utf8_lossy(parent.output.as_deref().unwrap_or_default());
    let log = parent.log.clone().unwrap_or_default();
    assert_eq!(
        (parent.status, output.as_ref()),
        (TaskStatus::Success, format!(r#"{{"done":{CAP}}}"#).as_str()),
        "{:?}, log:\n{log}",
        parent.last_error
    );
    assert_eq!(children.len(), CAP);
    // Each child's key is its rank among the task's children: the same
    // in every attempt, replayed or not.
    let mut keys: Vec<String> = children
        .iter()
        .filter_map(|child| child.idempotency_key.clone())
        .collect();
    keys.sort();
    let ranks: Vec<String> = (0..CAP).map(|rank| format!("child:{id}:{rank}")).collect();
    assert_eq!(keys, ranks);
    assert!(
        log.contains("refused to schedule a child") && log.contains("executor.max_children"),
        "the log says nothing of the cap:\n{log}"
    );
}
