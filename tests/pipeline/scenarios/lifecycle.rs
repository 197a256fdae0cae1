//! A task's life from its schedule to its end, on the lambdas [`setup`]
//! deploys: success, retries with backoff, a fatal failure, a dead letter
//! inspected and redriven, a memory limit breached, a cancel, and a bad
//! request refused with nothing stored.
//!
//! [`setup`]: super::setup

use std::time::Duration;

use serde_json::json;

use waft_core::TaskStatus;
use waft_sample_artifacts as samples;
use waft_services::{ClientApi, RunAt, ServiceError, TaskRequest};
use waft_store::{AttemptOutcome, DeadSelector, TaskList};

use super::helpers::WITHIN;
use crate::support::Cluster;

pub async fn success(cluster: &Cluster) {
    let id = cluster
        .schedule("hello", json!({"name": "Ada"}), None)
        .await;
    let task = cluster.finished(&id, WITHIN).await;
    assert_eq!(task.status, TaskStatus::Success, "{task:#?}");
    assert_eq!(task.attempt, 1);
    let output: serde_json::Value =
        serde_json::from_slice(task.output.as_deref().unwrap()).unwrap();
    assert_eq!(output, json!({"greeting": "Hello, Ada!"}));
    assert!(task.log.unwrap().contains("greeted on attempt 1"));
}

pub async fn retry_then_success(cluster: &Cluster) {
    let id = cluster
        .schedule("flaky", json!({"succeed_on": 3}), None)
        .await;
    let task = cluster.finished(&id, WITHIN).await;
    assert_eq!(
        (task.status, task.attempt),
        (TaskStatus::Success, 3),
        "{task:#?}"
    );
    // Two backoffs of at least half of 50 ms and 100 ms (equal jitter).
    let took = task.finished_at.unwrap() - task.created_at;
    assert!(took >= 75, "retried after {took} ms only");
}

pub async fn fatal(cluster: &Cluster) {
    let id = cluster.schedule("fatal", json!({}), None).await;
    let task = cluster.finished(&id, WITHIN).await;
    assert_eq!((task.status, task.attempt), (TaskStatus::FatalFailure, 1));
    assert!(task.last_error.unwrap().contains("no such account"));
}

pub async fn dead_letter(cluster: &Cluster) {
    let id = cluster
        .schedule("flaky2", json!({"succeed_on": 10}), None)
        .await;
    let task = cluster.finished(&id, WITHIN).await;
    assert_eq!(
        (task.status, task.attempt),
        (TaskStatus::Dead, 2),
        "{task:#?}"
    );
    assert!(task.last_error.is_some());
    // Inspect it: both executions, each with its own error and log.
    let shown: serde_json::Value =
        serde_json::from_str(&cluster.cli(&["dlq", "show", &id, "--json"])).unwrap();
    assert_eq!(shown["task"]["status"], "dead");
    let attempts = shown["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{shown:#}");
    for (n, attempt) in attempts.iter().enumerate() {
        assert_eq!(attempt["attempt"], n + 1);
        assert_eq!(attempt["outcome"], "retriable");
        assert!(attempt["error"].as_str().is_some_and(|e| !e.is_empty()));
        let log = attempt["log"].as_str().unwrap_or_default();
        assert!(log.contains(&format!("attempt {}", n + 1)), "{attempt:#}");
    }

    // Fix, redeploy, redrive: the dead task runs again on the new version.
    let not_dead = cluster
        .frontend
        .dead_redrive(
            DeadSelector::Ids(vec![id.clone(), "no-such-task".into()]),
            None,
            false,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(not_dead, ServiceError::NotFound(_)),
        "{not_dead:?}"
    );
    cluster
        .deploy("flaky2", samples::HELLO, |c| c.max_attempts = 2)
        .await;
    let unknown = cluster
        .frontend
        .dead_redrive(
            DeadSelector::Filter {
                lambda: "flaky2".into(),
                collection: None,
            },
            Some(9),
            false,
        )
        .await
        .unwrap_err();
    assert!(matches!(unknown, ServiceError::NotFound(_)), "{unknown:?}");
    let redriven = cluster.cli(&["dlq", "redrive", &id, "--version", "2"]);
    assert!(redriven.starts_with("1 dead tasks redriven"), "{redriven}");
    let task = cluster.finished(&id, WITHIN).await;
    assert_eq!(task.version, Some(2));
    assert_eq!(
        (task.status, task.attempt),
        (TaskStatus::Success, 1),
        "{task:#?}"
    );
    // The history keeps the dead attempts before the redriven one.
    let attempts = cluster.frontend.task_attempts(&id).await.unwrap();
    let outcomes: Vec<_> = attempts.iter().map(|a| (a.attempt, a.outcome)).collect();
    assert_eq!(
        outcomes,
        [
            (1, AttemptOutcome::Retriable),
            (2, AttemptOutcome::Retriable),
            (1, AttemptOutcome::Success)
        ]
    );
    let unknown = cluster.frontend.task_attempts("nope").await.unwrap_err();
    assert!(matches!(unknown, ServiceError::NotFound(_)), "{unknown:?}");
    // No journal entry replayed: the attempts say so, and an unknown
    // task's journal is "not found" (exit code 4).
    let shown: serde_json::Value =
        serde_json::from_str(&cluster.cli(&["dlq", "show", &id, "--json"])).unwrap();
    let replayed: Vec<&serde_json::Value> = shown["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| &a["replayed"])
        .collect();
    assert_eq!(replayed, [&json!(0); 3], "{shown:#}");
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_waft"));
    command
        .args(["task", "journal", "nope"])
        .env("WAFT_SERVER", &cluster.frontend_addr);
    if let Some(token) = &cluster.token {
        command.env("WAFT_TOKEN", token);
    }
    if let Some((_, ca)) = &cluster.ca {
        command.env("WAFT_CA", ca);
    }
    let output = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(4), "{stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
}

pub async fn over_its_limit(cluster: &Cluster) {
    let id = cluster.schedule("hog", json!({}), None).await;
    let task = cluster.finished(&id, WITHIN).await;
    assert_eq!(task.status, TaskStatus::FatalFailure, "{task:#?}");
    let error = task.last_error.unwrap();
    assert!(error.contains("limit exceeded (memory)"), "{error}");
}

pub async fn cancel(cluster: &Cluster) {
    let request = TaskRequest {
        lambda: "hello".into(),
        run_at: RunAt::After(Duration::from_secs(3600)),
        ..TaskRequest::default()
    };
    let id = cluster
        .frontend
        .task_schedule_many(vec![request])
        .await
        .unwrap()[0]
        .id
        .clone();
    let task = cluster.frontend.task_cancel(&id).await.unwrap();
    assert_eq!(task.status, TaskStatus::Cancelled);
    let again = cluster.frontend.task_cancel(&id).await.unwrap_err();
    assert!(
        matches!(again, ServiceError::FailedPrecondition(_)),
        "{again:?}"
    );
}

pub async fn bad_input_stores_nothing(cluster: &Cluster) {
    let before = cluster
        .frontend
        .task_list(TaskList::default())
        .await
        .unwrap()
        .len();
    let good = TaskRequest {
        lambda: "hello".into(),
        ..TaskRequest::default()
    };
    let cases = [
        (
            TaskRequest {
                priority: Some(9),
                ..good.clone()
            },
            "priority",
        ),
        (
            TaskRequest {
                lambda: "nope".into(),
                ..good.clone()
            },
            "unknown lambda",
        ),
        (
            TaskRequest {
                payload: vec![b'x'; 300 * 1024],
                ..good.clone()
            },
            "over lambda",
        ),
        (
            TaskRequest {
                run_at: RunAt::At(1),
                ..good.clone()
            },
            "too far",
        ),
    ];
    for (bad, expected) in cases {
        // The bad task rides with a good one: all or nothing.
        let error = cluster
            .frontend
            .task_schedule_many(vec![good.clone(), bad])
            .await
            .unwrap_err();
        assert!(error.to_string().contains(expected), "{error:?}");
    }
    let too_many = vec![good.clone(); 10_001];
    let error = cluster
        .frontend
        .task_schedule_many(too_many)
        .await
        .unwrap_err();
    assert!(
        matches!(error, ServiceError::ResourceExhausted(_)),
        "{error:?}"
    );
    let error = cluster
        .frontend
        .lambda_deploy("broken", b"\0asm garbage".to_vec(), Default::default())
        .await
        .unwrap_err();
    assert!(
        matches!(error, ServiceError::InvalidArgument(_)),
        "{error:?}"
    );
    // A payload declared JSON (as the dashboard declares it) is checked.
    let mut raw = waft_api::proto::frontend_client::FrontendClient::new(
        cluster.channel(&cluster.frontend_addr, cluster.token.as_deref()),
    );
    let declared = |payload: &str| waft_api::proto::ScheduleRequest {
        task: Some(waft_api::proto::NewTask {
            lambda: "hello".into(),
            payload: payload.as_bytes().to_vec(),
            payload_is_json: true,
            ..Default::default()
        }),
    };
    let refused = raw.schedule(declared(r#"{"name": "#)).await.unwrap_err();
    let refused = waft_api::status::from_status(refused, "Frontend");
    assert!(
        matches!(&refused, ServiceError::InvalidArgument(m)
            if m.starts_with("the payload is not JSON: EOF while parsing")),
        "{refused:?}"
    );
    let after = cluster
        .frontend
        .task_list(TaskList::default())
        .await
        .unwrap()
        .len();
    assert_eq!(before, after, "a refused request stored tasks");
    raw.schedule(declared(r#"{"name": "JSON"}"#)).await.unwrap();
    assert!(cluster.frontend.lambda_get("broken", None).await.is_err());
}
