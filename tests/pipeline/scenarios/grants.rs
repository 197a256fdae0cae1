//! What a lambda is granted beside its code: the destinations it may call
//! (a retry resends the same idempotency key, a call elsewhere is refused
//! and its log names the grant), and its environment and secrets, a secret
//! rotated or removed without a redeploy and never shown back.

use serde_json::json;

use waft_core::{LambdaConfig, TaskStatus};
use waft_sample_artifacts as samples;
use waft_services::{ClientApi, ServiceError};

use super::helpers::WITHIN;
use crate::support::Cluster;

/// A lambda granted a destination calls it; a retried task sends the same
/// idempotency key on every attempt; anything else is refused and the
/// task's log says what to grant; a component that calls out cannot be
/// deployed without a destination.
pub async fn outbound(cluster: &Cluster) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use waft_testing::http::{HttpServer, Reply};

    let flaky_calls = Arc::new(AtomicUsize::new(0));
    let calls = flaky_calls.clone();
    let server = HttpServer::start(move |request| match request.path.as_str() {
        "/flaky" if calls.fetch_add(1, Ordering::SeqCst) == 0 => Reply::Answer {
            status: 503,
            headers: vec![("retry-after".into(), "0".into())],
            body: Vec::new(),
        },
        _ => Reply::status(200, "received"),
    })
    .await;
    let refused = cluster
        .frontend
        .lambda_deploy(
            "webhook",
            std::fs::read(samples::WEBHOOK).unwrap(),
            LambdaConfig::default(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, ServiceError::InvalidArgument(m)
            if m.contains("wasi:http/outgoing-handler") && m.contains("--allow-outbound")),
        "{refused:?}"
    );
    let url = server.url();
    cluster
        .deploy("webhook", samples::WEBHOOK, |c| {
            c.grants.outbound = vec![url.parse().unwrap()]
        })
        .await;

    let id = cluster
        .schedule(
            "webhook",
            json!({"url": format!("{url}/hook"), "body": {"n": 1}}),
            None,
        )
        .await;
    let task = cluster.finished(&id, WITHIN).await;
    assert_eq!(task.status, TaskStatus::Success, "{task:#?}");

    let id = cluster
        .schedule("webhook", json!({"url": format!("{url}/flaky")}), None)
        .await;
    let task = cluster.finished(&id, WITHIN).await;
    assert_eq!(
        (task.status, task.attempt),
        (TaskStatus::Success, 2),
        "{task:#?}"
    );
    let keys: Vec<_> = server
        .requests()
        .iter()
        .filter(|r| r.path == "/flaky")
        .map(|r| r.header("idempotency-key").map(str::to_owned))
        .collect();
    assert_eq!(keys.len(), 2);
    assert_eq!(keys[0], Some(format!("waft-{id}-0")));
    assert_eq!(keys[0], keys[1]);

    let before = server.requests().len();
    let id = cluster
        .schedule("webhook", json!({"url": "http://127.0.0.1:9/nope"}), None)
        .await;
    let task = cluster.finished(&id, WITHIN).await;
    assert_eq!(task.status, TaskStatus::FatalFailure, "{task:#?}");
    let log = cluster.cli(&["task", "logs", &id]);
    assert!(
        log.contains("not on the lambda's allow-list")
            && log.contains("--allow-outbound http://127.0.0.1:9"),
        "{log}"
    );
    assert_eq!(server.requests().len(), before);

    let executor = if cluster.processes.contains_key("dev") {
        "dev"
    } else {
        "executor1"
    };
    let metrics = cluster.metrics(executor).await;
    for expected in [
        r#"waft_outbound_requests_total{lambda="webhook",host="127.0.0.1",outcome="2xx"}"#,
        r#"waft_outbound_requests_total{lambda="webhook",host="-",outcome="denied"}"#,
    ] {
        assert!(metrics.contains(expected), "no {expected} in:\n{metrics}");
    }
}

/// A secret reaches its lambda's next task, rotated or removed without a
/// redeploy, and never comes back out: not in the task's output, not in
/// any listing.
pub async fn secrets(cluster: &Cluster) {
    use waft_testing::http::{HttpServer, Reply};

    let server = HttpServer::start(|request| {
        Reply::status(200, request.header("authorization").unwrap_or("none"))
    })
    .await;
    let url = server.url();
    cluster
        .deploy("notifier", samples::WEBHOOK, |c| {
            c.grants.outbound = vec![url.parse().unwrap()];
            c.grants.env.insert("SOURCE".into(), "billing".into());
        })
        .await;
    let dir = tempfile::TempDir::new().unwrap();
    let set = |value: &str| {
        let file = dir.path().join("value");
        std::fs::write(&file, format!("{value}\n")).unwrap();
        cluster.cli(&[
            "secret",
            "set",
            "notifier",
            "WEBHOOK_TOKEN",
            "--file",
            &file.display().to_string(),
        ]);
    };
    let call = || async {
        let id = cluster
            .schedule("notifier", json!({"url": format!("{url}/notify")}), None)
            .await;
        let task = cluster.finished(&id, WITHIN).await;
        assert_eq!(task.status, TaskStatus::Success, "{task:#?}");
        (id, task)
    };

    set("tok-first-4b1d");
    let (id, task) = call().await;
    let sent = server.requests().pop().unwrap();
    assert_eq!(sent.header("authorization"), Some("Bearer tok-first-4b1d"));
    assert_eq!(sent.header("x-waft-source"), Some("billing"));
    let output = String::from_utf8(task.output.unwrap()).unwrap();
    assert!(output.contains("Bearer [redacted]"), "{output}");
    for shown in [
        cluster.cli(&["secret", "list", "notifier"]),
        cluster.cli(&["lambda", "get", "notifier", "--json"]),
        cluster.cli(&["task", "get", &id, "--json"]),
        cluster.cli(&["task", "logs", &id]),
    ] {
        assert!(!shown.contains("tok-first-4b1d"), "{shown}");
    }
    assert!(
        cluster
            .cli(&["secret", "list", "notifier"])
            .contains("WEBHOOK_TOKEN")
    );

    set("tok-second-9e2c");
    call().await;
    assert_eq!(
        server.requests().pop().unwrap().header("authorization"),
        Some("Bearer tok-second-9e2c")
    );

    cluster.cli(&["secret", "remove", "notifier", "WEBHOOK_TOKEN"]);
    call().await;
    assert_eq!(
        server.requests().pop().unwrap().header("authorization"),
        None
    );
}
