//! Prometheus metrics: every role serves its counters and gauges,
//! labelled by lambda, and they move by just what the scenario made
//! happen, summed over the processes as Prometheus would sum them.

use std::time::{Duration, Instant};

use serde_json::json;

use waft_core::{ByteSize, TaskStatus};
use waft_sample_artifacts as samples;
use waft_services::{ClientApi, ServiceError, TaskRequest};
use waft_store::AttemptOutcome;

use super::helpers::{WITHIN, scrape, total, value};
use crate::support::Cluster;

/// Every role's metrics are served for Prometheus, labelled by lambda, and
/// they count what happened. The scenario makes it happen on lambdas of its
/// own, so that no other scenario's work counts: two successes, a task that
/// fails twice before it succeeds, a memory breach, a burst refused by its
/// quota. Each counter must move by just that, summed over the processes as
/// Prometheus would: the store's own record of the tasks says how much (a
/// very busy machine may add attempts, or a second send). Then a backlog
/// deeper than the Controller buffers must show in the backlog's gauges:
/// a gauge that never moves fails it.
pub async fn metrics(cluster: &Cluster) {
    use waft_store::Task;

    cluster.deploy("counted", samples::HELLO, |_| {}).await;
    cluster
        .deploy("counted-flaky", samples::FLAKY, |_| {})
        .await;
    cluster
        .deploy("counted-hog", samples::HOG, |c| {
            c.limits.max_memory = ByteSize::mib(2)
        })
        .await;
    cluster
        .deploy("metered", samples::HELLO, |c| c.quota_per_sec = Some(1.0))
        .await;
    let before = scrape(cluster).await;

    let mut ids = Vec::new();
    for (lambda, payload) in [
        ("counted", json!({"name": "one"})),
        ("counted", json!({"name": "two"})),
        ("counted-flaky", json!({"succeed_on": 3})),
        ("counted-hog", json!({})),
    ] {
        ids.push(cluster.schedule(lambda, payload, None).await);
    }
    let mut tasks: Vec<Task> = Vec::new();
    for id in &ids {
        tasks.push(cluster.finished(id, WITHIN).await);
    }
    let statuses: Vec<TaskStatus> = tasks.iter().map(|t| t.status).collect();
    assert_eq!(
        statuses,
        [
            TaskStatus::Success,
            TaskStatus::Success,
            TaskStatus::Success,
            TaskStatus::FatalFailure
        ],
        "{tasks:#?}"
    );
    let burst = vec![
        TaskRequest {
            lambda: "metered".into(),
            ..TaskRequest::default()
        };
        20
    ];
    let refused = cluster.frontend.task_schedule_many(burst).await;
    assert!(
        matches!(refused, Err(ServiceError::ResourceExhausted(_))),
        "{refused:?}"
    );

    // How often each lambda's tasks ran (each execution was sent to a
    // queue first).
    let ran = |lambda: &str| -> f64 {
        let runs = tasks
            .iter()
            .filter(|t| t.lambda == lambda)
            .map(|t| t.attempt);
        f64::from(runs.sum::<u32>())
    };
    let attempts = cluster.frontend.task_attempts(&ids[2]).await.unwrap();
    let retried = attempts
        .iter()
        .filter(|a| a.outcome == AttemptOutcome::Retriable)
        .count() as f64;
    let exactly = |by: f64| (by, by);
    // Sent once per execution; again only if one waits unclaimed for the
    // enqueue timeout, as it might on a very busy machine: short of
    // counting every send twice.
    let sends = |lambda: &str| (ran(lambda), 2.0 * ran(lambda) - 1.0);
    let expected = [
        (
            r#"waft_tasks_scheduled_total{lambda="counted"}"#,
            exactly(2.0),
        ),
        (
            r#"waft_tasks_scheduled_total{lambda="metered"}"#,
            exactly(0.0),
        ),
        (
            r#"waft_tasks_refused_by_quota_total{lambda="metered"}"#,
            exactly(20.0),
        ),
        (
            r#"waft_tasks_enqueued_total{lambda="counted",priority="0"}"#,
            sends("counted"),
        ),
        (
            r#"waft_tasks_enqueued_total{lambda="counted-flaky",priority="0"}"#,
            sends("counted-flaky"),
        ),
        (
            r#"waft_executions_started_total{lambda="counted"}"#,
            exactly(ran("counted")),
        ),
        (
            r#"waft_executions_started_total{lambda="counted-flaky"}"#,
            exactly(ran("counted-flaky")),
        ),
        (
            r#"waft_executions_started_total{lambda="counted-hog"}"#,
            exactly(1.0),
        ),
        (
            r#"waft_executions_ended_total{lambda="counted",outcome="success"}"#,
            exactly(2.0),
        ),
        (
            r#"waft_executions_ended_total{lambda="counted-flaky",outcome="retriable"}"#,
            exactly(retried),
        ),
        (
            r#"waft_executions_ended_total{lambda="counted-flaky",outcome="success"}"#,
            exactly(1.0),
        ),
        (
            r#"waft_executions_ended_total{lambda="counted-hog",outcome="limit-memory"}"#,
            exactly(1.0),
        ),
        (
            r#"waft_limit_breaches_total{lambda="counted-hog",limit="memory"}"#,
            exactly(1.0),
        ),
        // First attempts only.
        (
            r#"waft_schedule_to_start_seconds_count{lambda="counted"}"#,
            exactly(2.0),
        ),
        (
            r#"waft_schedule_to_start_seconds_count{lambda="counted-flaky"}"#,
            exactly(1.0),
        ),
        (
            r#"waft_execution_seconds_count{lambda="counted"}"#,
            exactly(2.0),
        ),
    ];
    // The counts are made before a result is reported, but the enqueue
    // count after its send: allow a moment for it.
    let deadline = Instant::now() + WITHIN;
    loop {
        let after = scrape(cluster).await;
        let wrong: Vec<String> = expected
            .iter()
            .filter_map(|(series, (least, most))| {
                let by = total(&after, series) - total(&before, series);
                (by < *least || by > *most)
                    .then(|| format!("{series} moved by {by}, not {least}..={most}"))
            })
            .collect();
        if wrong.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{}\n{}",
            wrong.join("\n"),
            after.join("\n")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A backlog the gauges must show, measured every few seconds: more
    // tasks than the Controller buffers (256 a queue), one running at a
    // time, so that messages wait in the queue itself and the oldest due
    // task waits for seconds.
    cluster
        .deploy("deep", samples::SLEEPY, |c| c.concurrency = 1)
        .await;
    let deep = cluster
        .frontend
        .task_schedule_many(
            (0..300)
                .map(|_| TaskRequest {
                    lambda: "deep".into(),
                    payload: json!({"steps": 10, "step_ms": 100})
                        .to_string()
                        .into_bytes(),
                    ..TaskRequest::default()
                })
                .collect(),
        )
        .await
        .unwrap();
    let depth = r#"waft_queue_depth{lambda="deep",priority="0"}"#;
    let age = r#"waft_oldest_ready_task_age_seconds{lambda="deep",priority="0"}"#;
    let (mut deepest, mut oldest) = (0.0f64, 0.0f64);
    let deadline = Instant::now() + WITHIN;
    while deepest < 1.0 || oldest < 1.0 {
        assert!(
            Instant::now() < deadline,
            "the backlog's gauges did not move: queue depth at most {deepest}, \
             oldest waiting task at most {oldest} s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        // Every consumer measures the same backlog: the largest reading.
        for text in scrape(cluster).await {
            deepest = deepest.max(value(&text, depth));
            oldest = oldest.max(value(&text, age));
        }
    }
    eprintln!("backlog of 300: queue depth {deepest}, oldest waiting task {oldest} s");
    for task in deep {
        let _ = cluster.frontend.task_cancel(&task.id).await;
    }
}
