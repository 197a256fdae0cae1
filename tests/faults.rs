//! The failure cases of ATF's state table, on the distributed mode: real
//! `waft serve` processes killed and cut off mid-task. In every case the
//! task still ends, and no two executions of it ever overlap in time
//! (asserted from the executors' own "execution started/ended" records).

mod support;

use std::time::{Duration, Instant, SystemTime};

use serde_json::json;
use support::Cluster;
use waft_core::TaskStatus;
use waft_queue::{QueueKey, SqsQueue, TaskQueue};
use waft_sample_artifacts as samples;
use waft_services::{FrontendApi, HscApi};

const WITHIN: Duration = Duration::from_secs(60);

async fn cluster_with_sleepy() -> Option<Cluster> {
    let cluster = Cluster::distributed(2).await?;
    cluster.deploy("sleepy", samples::SLEEPY, |_| {}).await;
    cluster.deploy("hello", samples::HELLO, |_| {}).await;
    Some(cluster)
}

/// The executor process running `task`.
fn runner(cluster: &Cluster, task: &str) -> String {
    let needle = format!("execution started task={task}");
    cluster
        .processes
        .values()
        .filter(|p| p.name.starts_with("executor"))
        .find(|p| p.log().contains(&needle))
        .map(|p| p.name.clone())
        .unwrap_or_else(|| panic!("no executor runs {task}\n{}", cluster.logs()))
}

async fn processing(cluster: &Cluster, id: &str) {
    cluster
        .until(id, WITHIN, |t| t.status == TaskStatus::Processing)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_killed_mid_task_lets_the_task_run_elsewhere() {
    let Some(mut cluster) = cluster_with_sleepy().await else {
        return;
    };
    let id = cluster
        .schedule("sleepy", json!({"steps": 30, "step_ms": 100}), None)
        .await;
    processing(&cluster, &id).await;
    let victim = runner(&cluster, &id);
    cluster.process(&victim).kill();
    let killed = cluster.processes[&victim].killed_at[0];

    let task = cluster.finished(&id, WITHIN).await;
    assert_eq!(task.status, TaskStatus::Success, "{task:#?}");
    assert_eq!(task.attempt, 2, "one attempt lost with the executor");
    assert_eq!(cluster.assert_no_overlap(&id), 2);

    // Recovery: the task runs again within the heartbeat timeout (2 s here)
    // and a poll interval (100 ms) of its last heartbeat, plus delivery
    // (queue, controller, NextWork); measured from the kill.
    let again = cluster.executions(&id)[1].0;
    let recovery = again.duration_since(killed).unwrap();
    eprintln!(
        "recovery after an executor's death: {recovery:?} (heartbeat timeout 2 s, poll 100 ms)"
    );
    assert!(
        recovery <= Duration::from_millis(2_000 + 100 + 1_500),
        "{recovery:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_hsc_stops_the_instance_before_the_task_comes_back() {
    let Some(mut cluster) = cluster_with_sleepy().await else {
        return;
    };
    let id = cluster
        .schedule("sleepy", json!({"steps": 60, "step_ms": 100}), None)
        .await;
    processing(&cluster, &id).await;
    let executor = runner(&cluster, &id);
    let cut_off = SystemTime::now();
    cluster.process("hsc").kill();

    // Three failed heartbeats (300 ms apart, 200 ms each at most) stop it.
    let deadline = Instant::now() + Duration::from_secs(10);
    let stopped = format!("task={id}");
    while !cluster
        .process(&executor)
        .log()
        .lines()
        .any(|l| l.contains("stopped by its watchdog") && l.contains(&stopped))
    {
        assert!(Instant::now() < deadline, "{}", cluster.logs());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let first = cluster.executions(&id)[0];
    let stopped_after = first.1.duration_since(cut_off).unwrap_or_default();
    assert!(
        stopped_after < Duration::from_millis(1100 + 500),
        "the instance ran {stopped_after:?} after the HSC went away"
    );

    cluster.process("hsc").restart();
    let task = cluster.finished(&id, WITHIN).await;
    assert_eq!(task.status, TaskStatus::Success, "{task:#?}");
    assert_eq!(task.attempt, 2);
    assert_eq!(cluster.assert_no_overlap(&id), 2);
}

/// Receives from `key` until the message of `task` comes; returns its
/// enqueue token and acknowledges it (the message is gone for good).
async fn take_message(queue: &SqsQueue, key: &QueueKey, task: &str) -> i64 {
    let deadline = Instant::now() + WITHIN;
    loop {
        assert!(Instant::now() < deadline, "no message for {task}");
        for delivery in queue
            .queue_receive(key, 10, Duration::from_secs(1))
            .await
            .unwrap()
        {
            if delivery.message.task_id == task {
                queue
                    .queue_ack_many(key, vec![delivery.receipt])
                    .await
                    .unwrap();
                return delivery.message.enqueue_token;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_queue_message_is_enqueued_again() {
    let Some(mut cluster) = cluster_with_sleepy().await else {
        return;
    };
    // No controller takes messages while the test loses one.
    cluster.process("controller").kill();
    let queue = SqsQueue::new(cluster.sqs.clone().unwrap()).await;
    let id = cluster
        .schedule("hello", json!({"name": "lost"}), None)
        .await;
    take_message(&queue, &QueueKey::new("hello", 0), &id).await;
    cluster.process("controller").restart();

    // Back after the enqueue timeout (10 s here).
    let task = cluster.finished(&id, WITHIN).await;
    assert_eq!(task.status, TaskStatus::Success, "{task:#?}");
    assert_eq!(task.attempt, 1, "a lost message costs no attempt");

    // Recovery: claimed within the enqueue timeout and a poll interval of
    // its first enqueue (right after it was scheduled), plus delivery.
    let recovery = Duration::from_millis((task.claimed_at.unwrap() - task.created_at) as u64);
    eprintln!("recovery of a lost queue message: {recovery:?} (enqueue timeout 10 s, poll 100 ms)");
    assert!(
        recovery >= Duration::from_secs(10)
            && recovery <= Duration::from_millis(10_000 + 100 + 1_500),
        "{recovery:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_killed_after_its_claim_loses_no_task() {
    let Some(mut cluster) = cluster_with_sleepy().await else {
        return;
    };
    cluster.process("controller").kill();
    let queue = SqsQueue::new(cluster.sqs.clone().unwrap()).await;
    let id = cluster
        .schedule("hello", json!({"name": "orphan"}), None)
        .await;
    // Do what a controller does up to its claim, then die.
    let token = take_message(&queue, &QueueKey::new("hello", 0), &id).await;
    let hsc = waft_api::HscClient::new(
        cluster.channel(cluster.hsc.as_ref().unwrap(), cluster.token.as_deref()),
    );
    let claimed = hsc
        .task_claim_many(vec![(id.clone(), token)])
        .await
        .unwrap();
    assert!(claimed[0].is_ok(), "{claimed:?}");
    assert_eq!(
        cluster.frontend.task_get(&id).await.unwrap().status,
        TaskStatus::Claimed
    );
    cluster.process("controller").restart();

    // Back after the claim timeout, and run.
    let task = cluster.finished(&id, WITHIN).await;
    assert_eq!(task.status, TaskStatus::Success, "{task:#?}");
    assert_eq!(cluster.assert_no_overlap(&id), 1);
}
