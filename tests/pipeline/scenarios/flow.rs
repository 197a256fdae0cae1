//! When a lambda's tasks may start, lambda-wide: a paused gate holds them
//! and a dropped one ends them, a high priority overtakes a backlog, and a
//! quota refuses a flood at the Frontend and paces a backlog that came due
//! at once, without holding up another lambda's tasks. Limits per key are
//! in `keys.rs`.

use std::time::{Duration, Instant};

use serde_json::json;

use waft_core::TaskStatus;
use waft_sample_artifacts as samples;
use waft_services::{ClientApi, ServiceError, TaskRequest};
use waft_store::{GateState, TaskList};

use super::helpers::WITHIN;
use crate::support::Cluster;

/// A paused lambda's tasks wait in the store until it resumes; a dropped
/// collection's tasks end as dropped.
pub async fn gates(cluster: &Cluster) {
    cluster
        .frontend
        .gate_set("hello", None, GateState::Paused)
        .await
        .unwrap();
    let id = cluster
        .schedule("hello", json!({"name": "later"}), None)
        .await;
    let held = cluster.until(&id, WITHIN, |t| t.held).await;
    assert_eq!(held.status, TaskStatus::New);
    // The overview counts it held, not ready.
    let overview = cluster
        .frontend
        .lambda_stats(Duration::from_secs(3600))
        .await
        .unwrap();
    let hello = overview.lambdas.iter().find(|s| s.lambda == "hello");
    let hello = hello.expect("hello in the overview");
    assert!(hello.held >= 1 && hello.ready.is_empty(), "{hello:?}");
    assert!(overview.now > held.created_at, "the store's clock");
    let gates = cluster.frontend.gate_list().await.unwrap();
    assert!(
        gates
            .iter()
            .any(|g| g.lambda == "hello" && g.state == GateState::Paused)
    );
    let released = cluster
        .frontend
        .gate_set("hello", None, GateState::Open)
        .await
        .unwrap();
    assert_eq!(released, 1);
    assert_eq!(
        cluster.finished(&id, WITHIN).await.status,
        TaskStatus::Success
    );

    cluster
        .frontend
        .gate_set("hello", Some("promo"), GateState::Dropped)
        .await
        .unwrap();
    let request = TaskRequest {
        lambda: "hello".into(),
        collection: Some("promo".into()),
        ..TaskRequest::default()
    };
    let id = cluster
        .frontend
        .task_schedule_many(vec![request])
        .await
        .unwrap()[0]
        .id
        .clone();
    assert_eq!(
        cluster.finished(&id, WITHIN).await.status,
        TaskStatus::Dropped
    );
    let unknown = cluster
        .frontend
        .gate_set("nope", None, GateState::Paused)
        .await
        .unwrap_err();
    assert!(matches!(unknown, ServiceError::NotFound(_)), "{unknown:?}");
}

/// A backlog at low priority does not delay a high-priority task: with one
/// task at a time, the high one runs next, not after the backlog.
pub async fn priorities(cluster: &Cluster) {
    const BACKLOG: usize = 100;
    let low: Vec<TaskRequest> = (0..BACKLOG)
        .map(|i| TaskRequest {
            lambda: "one-at-a-time".into(),
            payload: json!({"name": format!("low {i}")}).to_string().into_bytes(),
            priority: Some(0),
            ..TaskRequest::default()
        })
        .collect();
    let low_ids: Vec<String> = cluster
        .frontend
        .task_schedule_many(low)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.id)
        .collect();
    // Let the backlog reach the queues and start running.
    cluster
        .until(&low_ids[0], WITHIN, |t| t.status == TaskStatus::Success)
        .await;
    let high = cluster
        .schedule("one-at-a-time", json!({"name": "vip"}), Some(2))
        .await;
    let high = cluster.finished(&high, WITHIN).await;
    assert_eq!(high.status, TaskStatus::Success);
    let done_before = cluster
        .frontend
        .task_list(TaskList {
            lambda: Some("one-at-a-time".into()),
            status: Some(TaskStatus::Success),
            limit: 1000,
            ..TaskList::default()
        })
        .await
        .unwrap()
        .iter()
        .filter(|t| t.priority == 0 && t.finished_at <= high.finished_at)
        .count();
    assert!(
        done_before < BACKLOG / 2,
        "{done_before} of {BACKLOG} low-priority tasks finished before the high-priority one"
    );
    // The backlog drains too. Queues are not FIFO (SQS standard queues
    // reorder), so no task but the high one has a promised place.
    for task in drained(cluster, "one-at-a-time", &low_ids).await {
        assert_eq!(task.status, TaskStatus::Success, "{task:#?}");
    }
}

/// Waits until every task of `ids` (of `lambda`) ended, and returns them.
/// A backlog drains at the machine's pace: it fails only after a minute in
/// which none ended, a stall.
async fn drained(cluster: &Cluster, lambda: &str, ids: &[String]) -> Vec<waft_store::Task> {
    const STALL: Duration = Duration::from_secs(60);
    let wanted: std::collections::HashSet<&str> = ids.iter().map(String::as_str).collect();
    let (mut done, mut progress) = (0, Instant::now());
    loop {
        let mut tasks = Vec::new();
        loop {
            let page = cluster
                .frontend
                .task_list(TaskList {
                    lambda: Some(lambda.into()),
                    after: tasks.last().map(|t: &waft_store::Task| t.id.clone()),
                    limit: 1000,
                    ..TaskList::default()
                })
                .await
                .unwrap();
            if page.is_empty() {
                break;
            }
            tasks.extend(page);
        }
        tasks.retain(|t| wanted.contains(t.id.as_str()));
        let ended = tasks.iter().filter(|t| t.status.is_terminal()).count();
        if ended == ids.len() {
            return tasks;
        }
        if ended > done {
            (done, progress) = (ended, Instant::now());
        }
        assert!(
            progress.elapsed() < STALL,
            "{done} of {} tasks of {lambda} ended, none in the last {STALL:?}: {:#?}",
            ids.len(),
            tasks.iter().find(|t| !t.status.is_terminal())
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Schedule→claim latency of one task of `lambda` scheduled now, in ms.
async fn start_latency(cluster: &Cluster, lambda: &str) -> i64 {
    let id = cluster
        .schedule(lambda, json!({"name": "calm"}), None)
        .await;
    let task = cluster.finished(&id, WITHIN).await;
    assert_eq!(task.status, TaskStatus::Success);
    task.claimed_at.unwrap() - task.created_at
}

fn median(mut values: Vec<i64>) -> i64 {
    values.sort_unstable();
    values[values.len() / 2]
}

/// Quotas. Flooding lambda A at 100× its quota is refused at the Frontend
/// beyond the quota, while lambda B's tasks keep running (their
/// schedule→start latency is printed: a figure, not a bound). A backlog of
/// A that came due at once after its quota was set starts at A's rate, not
/// all at once, each task no sooner than its slot; and a task of B
/// scheduled meanwhile does not wait behind it.
pub async fn quotas(cluster: &Cluster) {
    const QUOTA: f64 = 20.0;
    cluster
        .deploy("flood", samples::HELLO, |c| c.quota_per_sec = Some(QUOTA))
        .await;
    cluster.deploy("calm", samples::HELLO, |_| {}).await;
    let mut baseline = Vec::new();
    for _ in 0..5 {
        baseline.push(start_latency(cluster, "calm").await);
    }

    // 100× the quota for three seconds: batches of 20 every 10 ms (fewer
    // on a busy machine; still far over the quota).
    let flooding = Duration::from_secs(3);
    let frontend = cluster.frontend.clone();
    let flood = tokio::spawn(async move {
        let (mut admitted, mut refused) = (0, 0);
        let until = Instant::now() + flooding;
        while Instant::now() < until {
            let batch = vec![
                TaskRequest {
                    lambda: "flood".into(),
                    ..TaskRequest::default()
                };
                20
            ];
            match frontend.task_schedule_many(batch).await {
                Ok(tasks) => admitted += tasks.len(),
                Err(ServiceError::ResourceExhausted(_)) => refused += 20,
                Err(error) => panic!("{error:?}"),
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        (admitted, refused)
    });
    let mut during = Vec::new();
    while !flood.is_finished() {
        during.push(start_latency(cluster, "calm").await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (admitted, refused) = flood.await.unwrap();
    // A second's worth at once (the first batch), then the quota's rate.
    let most = (QUOTA * (flooding.as_secs_f64() + 1.0)) as usize + 20;
    assert!(
        QUOTA as usize <= admitted && admitted <= most && refused > 0,
        "admitted {admitted}, refused {refused}"
    );
    eprintln!(
        "flood: {admitted} admitted, {refused} refused; calm lambda schedule→start: baseline \
         median {} ms; during the flood median {} ms, max {} ms over {} tasks",
        median(baseline.clone()),
        median(during.clone()),
        during.iter().max().unwrap(),
        during.len()
    );

    // A backlog that predates the quota: 200 tasks held by a paused gate
    // while the quota is deployed (so none can start before it, however
    // long the deploy takes), then released at once.
    cluster.deploy("backlog", samples::HELLO, |_| {}).await;
    cluster
        .frontend
        .gate_set("backlog", None, GateState::Paused)
        .await
        .unwrap();
    let due = cluster.frontend.task_schedule_many(
        (0..200)
            .map(|_| TaskRequest {
                lambda: "backlog".into(),
                ..TaskRequest::default()
            })
            .collect(),
    );
    let ids: Vec<String> = due.await.unwrap().into_iter().map(|t| t.id).collect();
    cluster
        .deploy("backlog", samples::HELLO, |c| c.quota_per_sec = Some(QUOTA))
        .await;
    cluster
        .frontend
        .gate_set("backlog", None, GateState::Open)
        .await
        .unwrap();
    let calm = cluster
        .schedule("calm", json!({"name": "beside"}), None)
        .await;
    let backlog = drained(cluster, "backlog", &ids).await;
    for task in &backlog {
        assert_eq!(task.status, TaskStatus::Success, "{task:#?}");
    }
    let calm = cluster.finished(&calm, WITHIN).await;
    assert_eq!(calm.status, TaskStatus::Success);

    // Pacing, whatever the machine's speed: the first second's worth is
    // sent at once, and each later one no sooner than its slot, 1/QUOTA
    // apart (store times, whole milliseconds). A busy machine only makes
    // them later.
    let mut sent: Vec<i64> = backlog.iter().map(|t| t.enqueued_at.unwrap()).collect();
    sent.sort_unstable();
    let slot = 1000.0 / QUOTA;
    for (k, at) in sent.iter().enumerate() {
        let earliest = sent[0] + (k as f64 * slot - 1000.0).ceil() as i64 - 1;
        assert!(
            *at >= earliest,
            "task {k} of the backlog sent {} ms after the first; its slot is at {} ms",
            at - sent[0],
            earliest - sent[0]
        );
    }
    // Isolation: `calm` started while the backlog was still being paced
    // (its last task is sent 8.95 s after the first at the soonest); had it
    // waited behind the backlog, it would have started after.
    let last = *sent.last().unwrap();
    assert!(
        calm.claimed_at.unwrap() < last,
        "calm started {} ms after the backlog's last task was sent",
        calm.claimed_at.unwrap() - last
    );
    let mut claims: Vec<i64> = backlog.iter().map(|t| t.claimed_at.unwrap()).collect();
    claims.sort_unstable();
    let first_second = claims.iter().filter(|&&at| at < claims[0] + 1000).count();
    eprintln!(
        "backlog of 200 at {QUOTA}/s: {first_second} started in the first second, all within \
         {} ms; calm beside it: {} ms schedule→start",
        claims[199] - claims[0],
        calm.claimed_at.unwrap() - calm.created_at
    );
}
