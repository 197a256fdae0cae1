//! Retention end to end: a lambda deployed with `--retain` has its ended
//! tasks deleted by the pruner once their time is up, while the ends it
//! does not name keep the installation's retention; a dead letter stays
//! until `waft dlq purge` deletes it; and `waft lambda delete` removes a
//! lambda once nothing of it may run, or with its tasks (`--drop-tasks`),
//! and its SQS queues in the distributed mode; a task of it running then
//! is stopped.

use std::time::{Duration, Instant};

use serde_json::json;
use waft_core::TaskStatus;
use waft_sample_artifacts as samples;
use waft_services::{ClientApi, RunAt, ServiceError, TaskRequest};

use crate::support::Cluster;

const WITHIN: Duration = Duration::from_secs(30);

pub async fn retention(cluster: &Cluster) {
    cluster.cli(&[
        "lambda",
        "deploy",
        "brief",
        samples::HELLO,
        "--retain",
        "success=1s",
        "--retain",
        "fatal=forever",
    ]);
    let shown: serde_json::Value =
        serde_json::from_str(&cluster.cli(&["lambda", "get", "brief", "--json"])).unwrap();
    assert_eq!(
        shown["config"]["retention"],
        json!({"success": "1s", "fatal": "forever"})
    );
    let (code, error) = cluster.cli_failing(&[
        "lambda",
        "deploy",
        "brief",
        samples::HELLO,
        "--retain",
        "success=soon",
    ]);
    assert_eq!(code, 2, "{error}");
    assert!(error.contains("forever"), "{error}");

    let done = cluster
        .schedule("brief", json!({"name": "kept briefly"}), None)
        .await;
    assert_eq!(
        cluster.finished(&done, WITHIN).await.status,
        TaskStatus::Success
    );
    let cancelled = in_an_hour(cluster, "brief").await;
    cluster.frontend.task_cancel(&cancelled).await.unwrap();

    // The pruner (every 200 ms in the test clusters) deletes the success a
    // second after it ended, with its attempts.
    let start = Instant::now();
    loop {
        match cluster.frontend.task_get(&done).await {
            Err(ServiceError::NotFound(_)) => break,
            Ok(_) if start.elapsed() < WITHIN => {
                tokio::time::sleep(Duration::from_millis(200)).await
            }
            other => panic!(
                "still there after {WITHIN:?}: {other:?}\n{}",
                cluster.logs()
            ),
        }
    }
    assert!(
        cluster
            .frontend
            .task_attempts(&done)
            .await
            .map_or(true, |a| a.is_empty())
    );
    let kept = cluster.frontend.task_get(&cancelled).await.unwrap();
    assert_eq!(
        kept.status,
        TaskStatus::Cancelled,
        "the installation's retention: a day"
    );

    // A dead letter stays until purged.
    cluster
        .deploy("doomed", samples::FLAKY, |c| c.max_attempts = 1)
        .await;
    let dead = cluster
        .schedule("doomed", json!({"succeed_on": 10}), None)
        .await;
    assert_eq!(
        cluster.finished(&dead, WITHIN).await.status,
        TaskStatus::Dead
    );
    let (code, error) = cluster.cli_failing(&["dlq", "purge", &dead, &cancelled]);
    assert_ne!(code, 0);
    assert!(error.contains("not dead"), "{error}");
    assert_eq!(
        cluster.frontend.task_get(&dead).await.unwrap().status,
        TaskStatus::Dead
    );
    let purged = cluster.cli(&["dlq", "purge", "--lambda", "doomed"]);
    assert_eq!(purged.trim(), "1 dead tasks deleted");
    let gone = cluster.frontend.task_get(&dead).await.unwrap_err();
    assert!(matches!(gone, ServiceError::NotFound(_)), "{gone:?}");
    let (code, error) = cluster.cli_failing(&["dlq", "purge"]);
    assert_eq!(code, 2, "{error}");

    // A lambda goes once nothing of it may still run, or with its tasks.
    let waiting = in_an_hour(cluster, "doomed").await;
    let (code, error) = cluster.cli_failing(&["lambda", "delete", "doomed"]);
    assert_ne!(code, 0);
    assert!(error.contains("--drop-tasks"), "{error}");
    let queues = cluster.sqs_queues_of("doomed").await;
    if let Some(queues) = &queues {
        assert!(!queues.is_empty(), "its dead task went through a queue");
    }
    let deleted = cluster.cli(&["lambda", "delete", "doomed", "--drop-tasks"]);
    assert_eq!(
        deleted.trim(),
        "doomed deleted, with 1 tasks (1 of them not ended)"
    );
    // Its queues go too, at the pruner's next turn.
    if queues.is_some() {
        let started = Instant::now();
        while cluster.sqs_queues_of("doomed").await != Some(Vec::new()) {
            assert!(
                started.elapsed() < WITHIN,
                "doomed's queues are still there"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert!(matches!(
        cluster.frontend.task_get(&waiting).await,
        Err(ServiceError::NotFound(_))
    ));
    let deleted = cluster.cli(&["lambda", "delete", "brief", "--json"]);
    let deleted: serde_json::Value = serde_json::from_str(&deleted).unwrap();
    assert_eq!(
        deleted,
        json!({"lambda": "brief", "tasks": 1, "live": 0}),
        "its cancelled task"
    );
    let (_, error) = cluster.cli_failing(&["lambda", "get", "brief"]);
    assert!(error.contains("unknown lambda"), "{error}");

    a_running_lambda_is_stopped_by_its_deletion(cluster).await;
}

/// A lambda deleted while a task of it runs: the executor's next heartbeat
/// finds the task gone, stops the instance and reports nothing; the
/// executor goes on running other lambdas' tasks.
async fn a_running_lambda_is_stopped_by_its_deletion(cluster: &Cluster) {
    cluster.deploy("busy", samples::SLEEPY, |_| {}).await;
    let running = cluster
        .schedule("busy", json!({"steps": 600, "step_ms": 100}), None)
        .await;
    let start = Instant::now();
    while cluster.frontend.task_get(&running).await.unwrap().status != TaskStatus::Processing {
        assert!(start.elapsed() < WITHIN, "never ran\n{}", cluster.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let deleted = cluster.cli(&["lambda", "delete", "busy", "--drop-tasks"]);
    assert_eq!(
        deleted.trim(),
        "busy deleted, with 1 tasks (1 of them not ended)"
    );
    // Within a heartbeat timeout (2 s in the test clusters), not the
    // minute its steps would take.
    let start = Instant::now();
    while ended(cluster, "busy").await == 0.0 {
        assert!(
            start.elapsed() < WITHIN,
            "the execution did not stop\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(matches!(
        cluster.frontend.task_get(&running).await,
        Err(ServiceError::NotFound(_))
    ));
    cluster.deploy("after", samples::HELLO, |_| {}).await;
    let after = cluster
        .schedule("after", json!({"name": "next"}), None)
        .await;
    assert_eq!(
        cluster.finished(&after, WITHIN).await.status,
        TaskStatus::Success
    );
}

/// Executions of `lambda` ended, whatever their outcome, in every process.
async fn ended(cluster: &Cluster, lambda: &str) -> f64 {
    let series = format!("waft_executions_ended_total{{lambda=\"{lambda}\",");
    let mut sum = 0.0;
    for name in cluster.processes.keys() {
        let text = cluster.metrics(name).await;
        sum += text
            .lines()
            .filter(|line| line.starts_with(&series))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
    }
    sum
}

/// A task of `lambda` due in an hour: it waits, live, through the scenario.
async fn in_an_hour(cluster: &Cluster, lambda: &str) -> String {
    let later = TaskRequest {
        lambda: lambda.into(),
        run_at: RunAt::After(Duration::from_secs(3600)),
        ..TaskRequest::default()
    };
    let inserted = cluster.frontend.task_schedule_many(vec![later]).await;
    inserted.unwrap().remove(0).id
}
