//! An idle installation's cost does not grow with its lambdas: with many
//! lambdas deployed and nothing due, the Controller leaves their queues
//! alone — counted on the wire between it and the queue service — and a
//! task scheduled then still starts at once, on the consumer's word alone.

use std::time::{Duration, Instant};

use serde_json::json;
use waft_core::TaskStatus;
use waft_sample_artifacts as samples;
use waft_services::{ClientApi, TaskRequest};

use crate::support::{Cluster, Layout};

/// Lambdas deployed: polling each queue once a second, as a Controller
/// that polls every queue would, makes 10× the bound below.
const LAMBDAS: usize = 40;
/// How long the installation is watched while idle.
const IDLE: Duration = Duration::from_secs(10);
/// SQS requests the Controller may make while idle: 2 a second.
const MAX_IDLE_REQUESTS: usize = 20;

/// `Ok(false)` when this machine cannot run the distributed mode.
pub async fn an_idle_controller_leaves_the_queues_alone() -> bool {
    let Some(cluster) = Cluster::distributed_with(Layout {
        executors: 1,
        hsc_link: false,
        sqs_link: true,
        // Only the consumer's word can start a task in time: no sweep, no
        // second enqueue, no refresh within the test.
        env: &[
            ("WAFT_CONTROLLER_SWEEP", "120s"),
            ("WAFT_CONSUMER_ENQUEUE_TIMEOUT", "120s"),
            ("WAFT_CONTROLLER_REFRESH", "120s"),
            ("WAFT_EXECUTOR_REFRESH", "120s"),
        ],
    })
    .await
    else {
        return false;
    };
    let names: Vec<String> = (0..LAMBDAS).map(|i| format!("idle-{i}")).collect();
    for name in &names {
        cluster.deploy(name, samples::HELLO, |_| {}).await;
    }
    // One task each: every queue exists and has been polled once.
    let requests = (names.iter())
        .map(|name| TaskRequest {
            lambda: name.clone(),
            payload: json!({}).to_string().into_bytes(),
            ..TaskRequest::default()
        })
        .collect();
    let scheduled = cluster.frontend.task_schedule_many(requests).await.unwrap();
    for task in &scheduled {
        let task = cluster.finished(&task.id, Duration::from_secs(60)).await;
        assert_eq!(task.status, TaskStatus::Success, "{task:#?}");
    }
    let link = cluster
        .sqs_link
        .as_ref()
        .expect("the Controller's SQS link");
    // The last pollers' empty answers (one receive wait each) end first.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = link.sqs_requests();
    tokio::time::sleep(IDLE).await;
    let after = link.sqs_requests();
    let idle: usize = (after.iter())
        .map(|(action, count)| count - before.get(action).copied().unwrap_or(0))
        .sum();
    eprintln!("idle Controller: {idle} SQS requests in {IDLE:?} with {LAMBDAS} lambdas");
    assert!(
        idle <= MAX_IDLE_REQUESTS,
        "the idle Controller made {idle} SQS requests in {IDLE:?} with {LAMBDAS} lambdas \
         (before {before:?}, after {after:?})"
    );
    assert!(
        before.get("ReceiveMessage").copied().unwrap_or(0) >= LAMBDAS,
        "the link counts the Controller's receives: {before:?}"
    );

    // A task now starts on the consumer's word: the sweep, a second
    // enqueue and the refreshes are minutes away.
    let started = Instant::now();
    let id = cluster.schedule("idle-7", json!({}), None).await;
    let task = cluster.finished(&id, Duration::from_secs(60)).await;
    assert_eq!(task.status, TaskStatus::Success);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the task took {:?}",
        started.elapsed()
    );
    true
}
