//! Durable waits end to end: a lambda that sleeps is suspended — its task
//! `suspended` in the store, its slot free — and resumes when the wait is
//! over (or the signal it waits for is sent), by replay, each outside call
//! made once.

use std::time::{Duration, Instant};

use serde_json::json;
use waft_core::TaskStatus;
use waft_sample_artifacts as samples;
use waft_services::{ClientApi, ServiceError};
use waft_store::AttemptOutcome;
use waft_testing::http::{HttpServer, Reply};

use crate::support::Cluster;

const WITHIN: Duration = Duration::from_secs(30);

async fn deploy_durable(cluster: &Cluster, server: &HttpServer, concurrency: u32) {
    let url = server.url();
    cluster
        .deploy("durable", samples::DURABLE, |c| {
            c.grants.outbound = vec![url.parse().unwrap()];
            c.concurrency = concurrency;
        })
        .await;
}

/// Two posts three seconds apart (`std::thread::sleep`): the task is
/// suspended between them, shown so by `waft task list`, and ends on its
/// first attempt soon after the wait, each post made once.
pub async fn durable_sleep(cluster: &Cluster) {
    let server = HttpServer::start(|_| Reply::status(200, "ok")).await;
    deploy_durable(cluster, &server, 8).await;
    let plan = json!({"url": server.url(), "posts": 2, "step_ms": 3000});
    let scheduled = Instant::now();
    let id = cluster.schedule("durable", plan, None).await;

    let suspended = cluster
        .until(&id, WITHIN, |t| t.status == TaskStatus::Suspended)
        .await;
    assert_eq!(suspended.attempt, 0, "a suspension spends no attempt");
    assert_eq!(server.requests().len(), 1);
    let listed = cluster.cli(&[
        "task",
        "list",
        "--lambda",
        "durable",
        "--status",
        "suspended",
    ]);
    assert!(listed.contains(&id), "{listed}");

    let task = cluster.finished(&id, WITHIN).await;
    let took = scheduled.elapsed();
    assert_eq!(
        (task.status, task.attempt),
        (TaskStatus::Success, 1),
        "{task:#?}"
    );
    assert!(took >= Duration::from_secs(3), "{took:?}");
    // The usual delivery latency of a delayed task, with room for a loaded
    // machine.
    assert!(took < Duration::from_secs(8), "{took:?}");
    assert_eq!(server.requests().len(), 2, "each post once");
    let attempts = cluster.frontend.task_attempts(&id).await.unwrap();
    let seen: Vec<_> = attempts.iter().map(|a| (a.attempt, a.outcome)).collect();
    assert_eq!(
        seen,
        [(1, AttemptOutcome::Suspended), (1, AttemptOutcome::Success)]
    );
}

/// With a concurrency of 2, ten sleeping tasks hold no instance: a task
/// that does not sleep runs at once beside them, and they all end.
pub async fn suspended_tasks_hold_no_slot(cluster: &Cluster) {
    let server = HttpServer::start(|_| Reply::status(200, "ok")).await;
    deploy_durable(cluster, &server, 2).await;
    let sleepers: Vec<String> = {
        let mut ids = Vec::new();
        for n in 0..10 {
            let plan = json!({"sleep_ms": 4000, "n": n});
            ids.push(cluster.schedule("durable", plan, None).await);
        }
        ids
    };
    for id in &sleepers {
        cluster
            .until(id, WITHIN, |t| t.status == TaskStatus::Suspended)
            .await;
    }
    let started = Instant::now();
    let quick = cluster.schedule("durable", json!({}), None).await;
    let task = cluster.finished(&quick, WITHIN).await;
    assert_eq!(task.status, TaskStatus::Success);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "waited {:?} behind sleeping tasks",
        started.elapsed()
    );
    for id in &sleepers {
        let task = cluster.frontend.task_get(id).await.unwrap();
        assert!(
            task.status == TaskStatus::Suspended || task.status.is_terminal(),
            "{task:#?}"
        );
    }
    for id in &sleepers {
        let task = cluster.finished(id, WITHIN).await;
        assert_eq!((task.status, task.attempt), (TaskStatus::Success, 1));
    }
}

/// A task waiting for a signal is suspended until `waft task signal` sends
/// it, then resumes at once and takes its payload; a signal sent before
/// the wait is kept for it; one to an ended task is refused.
pub async fn signals(cluster: &Cluster) {
    let server = HttpServer::start(|_| Reply::status(200, "ok")).await;
    deploy_durable(cluster, &server, 8).await;

    // Sent after the task is suspended in its wait.
    let plan =
        json!({"signals": ["approved"], "signal_ms": 600_000, "url": server.url(), "posts": 1});
    let id = cluster.schedule("durable", plan, None).await;
    let suspended = cluster
        .until(&id, WITHIN, |t| t.status == TaskStatus::Suspended)
        .await;
    assert_eq!(suspended.attempt, 0);
    // Its version is shown as needed by it.
    let versions = cluster.cli(&["lambda", "versions", "durable"]);
    assert!(versions.contains("of them suspended"), "{versions}");
    let sent = Instant::now();
    let said = cluster.cli(&[
        "task",
        "signal",
        &id,
        "approved",
        "--payload",
        r#"{"by":"Ada"}"#,
    ]);
    assert!(said.contains("it resumes"), "{said}");
    let task = cluster.finished(&id, WITHIN).await;
    assert!(
        sent.elapsed() < Duration::from_secs(5),
        "{:?}",
        sent.elapsed()
    );
    assert_eq!(
        (task.status, task.attempt),
        (TaskStatus::Success, 1),
        "{task:#?}"
    );
    let output: serde_json::Value = serde_json::from_slice(&task.output.unwrap()).unwrap();
    assert_eq!(output["signals"], json!([r#"{"by":"Ada"}"#]));
    assert_eq!(server.requests().len(), 1, "the post once, after the wait");

    // Sent before the task reaches its wait: kept, and taken by it.
    let plan = json!({"signals": ["go"], "signal_ms": 600_000, "sleep_ms": 1500});
    let id = cluster.schedule("durable", plan, None).await;
    let sent = cluster
        .frontend
        .task_signal(&id, "go", b"early".to_vec())
        .await
        .unwrap();
    assert!(!sent.woke, "the task was not waiting yet");
    let task = cluster.finished(&id, WITHIN).await;
    assert_eq!(task.status, TaskStatus::Success, "{task:#?}");
    let output: serde_json::Value = serde_json::from_slice(&task.output.unwrap()).unwrap();
    assert_eq!(output["signals"], json!(["early"]));

    // An ended task takes no signal: FAILED_PRECONDITION, and the CLI says
    // so with a non-zero exit.
    let refused = cluster.frontend.task_signal(&id, "go", Vec::new()).await;
    assert!(
        matches!(refused, Err(ServiceError::FailedPrecondition(_))),
        "{refused:?}"
    );
    let (code, stderr) = cluster.cli_failing(&["task", "signal", &id, "go"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("has already ended"), "{stderr}");
}

/// A task that schedules 100 children, some of which fail, and waits for
/// them all is suspended until the last ends, then resumes on its first
/// attempt with each child's end, each child scheduled once.
pub async fn fan_in(cluster: &Cluster) {
    cluster.deploy("hello", samples::HELLO, |_| {}).await;
    cluster.deploy("fatal", samples::FATAL, |_| {}).await;
    cluster
        .deploy("gather", samples::CHAIN, |c| {
            c.allowed_children = vec!["hello".into(), "fatal".into()];
        })
        .await;
    let children: Vec<_> = (0..100)
        .map(|n| {
            let lambda = if n % 10 == 3 { "fatal" } else { "hello" };
            json!({"lambda": lambda, "payload": {"name": format!("child {n}")}})
        })
        .collect();
    let plan = json!({"children": children, "wait": true});
    let id = cluster.schedule("gather", plan, None).await;
    let task = cluster.finished(&id, Duration::from_secs(120)).await;
    assert_eq!(
        (task.status, task.attempt),
        (TaskStatus::Success, 1),
        "{task:#?}"
    );
    let output: serde_json::Value = serde_json::from_slice(&task.output.unwrap()).unwrap();
    let ends = output["ends"].as_array().unwrap();
    assert_eq!(ends.len(), 100);
    assert_eq!(
        ends[..].iter().map(|e| &e["id"]).collect::<Vec<_>>(),
        output["children"]
            .as_array()
            .unwrap()
            .iter()
            .collect::<Vec<_>>()
    );
    let failed = ends
        .iter()
        .filter(|e| e["status"] == "FatalFailure")
        .count();
    let succeeded = ends.iter().filter(|e| e["status"] == "Success").count();
    assert_eq!((succeeded, failed), (90, 10), "{ends:#?}");
    assert!(
        ends[0]["output"].as_str().unwrap().contains("child 0"),
        "{}",
        ends[0]
    );
    let listed = cluster
        .frontend
        .task_list(waft_core::model::TaskList {
            parent_id: Some(id.clone()),
            limit: 1000,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.len(), 100, "each child scheduled once");
}

/// How many of `lambda`'s tasks are `status`.
async fn counted(cluster: &Cluster, lambda: &str, status: TaskStatus) -> u64 {
    let filter = waft_core::model::TaskCount {
        lambda: lambda.into(),
        ..Default::default()
    };
    let counts = cluster.frontend.task_count(filter).await.unwrap();
    counts
        .iter()
        .find(|c| c.status == status)
        .map_or(0, |c| c.count)
}

/// An executor of four slots holds a thousand sleeping tasks — all
/// suspended, none holding a slot — and still runs a new task at once.
pub async fn a_small_executor_holds_a_thousand_sleepers_and_runs_new_tasks_at_once() {
    let mut cluster = Cluster::dev().await;
    cluster
        .process("dev")
        .restart_with("WAFT_EXECUTOR_MAX_TASKS", "4");
    cluster.ready().await;
    let server = HttpServer::start(|_| Reply::status(200, "ok")).await;
    deploy_durable(&cluster, &server, 4).await;
    for n in 0..1000 {
        let plan = json!({"sleep_ms": 600_000, "n": n});
        cluster.schedule("durable", plan, None).await;
    }
    let deadline = Instant::now() + Duration::from_secs(180);
    while counted(&cluster, "durable", TaskStatus::Suspended).await < 1000 {
        assert!(
            Instant::now() < deadline,
            "not all suspended in time: {}",
            counted(&cluster, "durable", TaskStatus::Suspended).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let started = Instant::now();
    let quick = cluster.schedule("durable", json!({}), None).await;
    let task = cluster.finished(&quick, WITHIN).await;
    assert_eq!(task.status, TaskStatus::Success, "{task:#?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "waited {:?} behind a thousand sleeping tasks",
        started.elapsed()
    );
    assert_eq!(
        counted(&cluster, "durable", TaskStatus::Suspended).await,
        1000
    );
}

/// Killing the only process while tasks are suspended changes nothing:
/// restarted, they resume when due, on their first attempt, each outside
/// call made once.
pub async fn a_kill_while_tasks_are_suspended_changes_nothing() {
    let mut cluster = Cluster::dev().await;
    let server = HttpServer::start(|_| Reply::status(200, "ok")).await;
    deploy_durable(&cluster, &server, 8).await;
    let mut ids = Vec::new();
    for n in 0..3 {
        let plan = json!({"url": server.url(), "posts": 2, "step_ms": 4000, "n": n});
        ids.push(cluster.schedule("durable", plan, None).await);
    }
    for id in &ids {
        cluster
            .until(id, WITHIN, |t| t.status == TaskStatus::Suspended)
            .await;
    }
    cluster.process("dev").kill();
    tokio::time::sleep(Duration::from_secs(1)).await;
    cluster.process("dev").restart();
    cluster.ready().await;
    for id in &ids {
        let task = cluster.finished(id, WITHIN).await;
        assert_eq!(
            (task.status, task.attempt),
            (TaskStatus::Success, 1),
            "{task:#?}"
        );
    }
    assert_eq!(server.requests().len(), 6, "each post once");
}
