//! Lambdas from beyond the Rust SDK's current contract: ones written in
//! Python and in JavaScript, and one built against the first contract
//! (`waft:lambda@0.1.0`), each deployed and run beside the others.

use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::Mutex;

use waft_core::TaskStatus;
use waft_sample_artifacts as samples;

use crate::support::Cluster;

/// Held while a mode runs a language's samples: the first mode's Frontend
/// compiles its large components at deploy into the compile cache every
/// process shares (tests/support), and the second mode waits and finds
/// them there, instead of both compiling the same components at once.
static PYTHON: Mutex<()> = Mutex::const_new(());
static JAVASCRIPT: Mutex<()> = Mutex::const_new(());

/// Takes `lock`, saying how long it waited when it did: that time is the
/// other mode's compile, not this scenario's, though the trial's time in
/// the log counts it.
async fn after_the_other_mode(
    lock: &'static Mutex<()>,
    language: &str,
) -> tokio::sync::MutexGuard<'static, ()> {
    let asked = Instant::now();
    let guard = lock.lock().await;
    let waited = asked.elapsed();
    if waited > Duration::from_secs(1) {
        eprintln!(
            "{language}: waited {:.1} s for the other mode to compile the samples",
            waited.as_secs_f64()
        );
    }
    guard
}

/// Lambdas written in Python deploy and run like any other, the webhook
/// caller with its grant and its secret.
pub async fn python(cluster: &Cluster) {
    let (Some(hello), Some(webhook)) = (samples::PYTHON_HELLO, samples::PYTHON_WEBHOOK) else {
        // The samples' build fails under CI=true instead.
        eprintln!("skipping: componentize-py is not installed (run scripts/setup)");
        return;
    };
    let _compiling = after_the_other_mode(&PYTHON, "python").await;
    hello_and_webhook(cluster, "py", hello, webhook).await;
}

/// Lambdas written in JavaScript deploy and run like any other, the
/// webhook caller with its grant and its secret.
pub async fn javascript(cluster: &Cluster) {
    let (Some(hello), Some(webhook)) = (samples::JS_HELLO, samples::JS_WEBHOOK) else {
        // The samples' build fails under CI=true instead.
        eprintln!("skipping: componentize-js is not installed (run scripts/setup)");
        return;
    };
    let _compiling = after_the_other_mode(&JAVASCRIPT, "javascript").await;
    hello_and_webhook(cluster, "js", hello, webhook).await;
}

/// A language's `hello` and `webhook` samples, deployed as `hello-SUFFIX`
/// and `webhook-SUFFIX`, each run once: the webhook calls a real server with
/// the secret it was given as a bearer token.
async fn hello_and_webhook(cluster: &Cluster, suffix: &str, hello: &str, webhook: &str) {
    use waft_testing::http::{HttpServer, Reply};

    // Its deploy compiled the 12–18 MB component (or found it in the
    // compile cache); a debug build runs the first task of each slowly.
    const COMPILING: Duration = Duration::from_secs(120);
    let hello_name = format!("hello-{suffix}");
    cluster
        .deploy(&hello_name, hello, |c| {
            c.allowed_children = vec![hello_name.clone()];
        })
        .await;
    let id = cluster
        .schedule(&hello_name, json!({"name": "Grace"}), None)
        .await;
    let task = cluster.finished(&id, COMPILING).await;
    assert_eq!(task.status, TaskStatus::Success, "{task:#?}");
    let output: serde_json::Value =
        serde_json::from_slice(task.output.as_deref().unwrap()).unwrap();
    assert_eq!(output, json!({"greeting": "Hello, Grace!"}));
    assert!(task.log.unwrap().contains("greeted on attempt 1"));

    // A fan-in: two children of its own, gathered.
    let children = json!([
        {"lambda": hello_name, "payload": {"name": "Ada"}, "key": "ada"},
        {"lambda": hello_name, "payload": {"name": "Lin"}},
    ]);
    let id = cluster
        .schedule(&hello_name, json!({"children": children}), None)
        .await;
    let task = cluster.finished(&id, COMPILING).await;
    assert_eq!(
        (task.status, task.attempt),
        (TaskStatus::Success, 1),
        "{task:#?}"
    );
    let output: serde_json::Value =
        serde_json::from_slice(task.output.as_deref().unwrap()).unwrap();
    let ends = output["ends"].as_array().unwrap();
    assert_eq!(ends.len(), 2, "{output}");
    assert!(
        ends.iter().all(|end| end["status"] == "success"),
        "{output}"
    );
    assert!(
        ends[1]["output"].as_str().unwrap().contains("Hello, Lin!"),
        "{output}"
    );
    // The first child was scheduled with a key, the second without.
    let keys: Vec<Option<String>> = ends
        .iter()
        .map(|end| end["id"].as_str().unwrap())
        .map(|child| {
            let get = cluster.cli(&["task", "get", child, "--json"]);
            let child: serde_json::Value = serde_json::from_str(&get).unwrap();
            child["key"].as_str().map(str::to_owned)
        })
        .collect();
    assert_eq!(keys, [Some("ada".to_owned()), None]);

    let server = HttpServer::start(|request| {
        Reply::status(200, request.header("authorization").unwrap_or("none"))
    })
    .await;
    let url = server.url();
    let webhook_name = format!("webhook-{suffix}");
    cluster
        .deploy(&webhook_name, webhook, |c| {
            c.grants.outbound = vec![url.parse().unwrap()];
        })
        .await;
    let dir = tempfile::TempDir::new().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, format!("tok-{suffix}-61c0")).unwrap();
    cluster.cli(&[
        "secret",
        "set",
        &webhook_name,
        "WEBHOOK_TOKEN",
        "--file",
        &file.display().to_string(),
    ]);
    let id = cluster
        .schedule(
            &webhook_name,
            json!({"url": format!("{url}/{suffix}")}),
            None,
        )
        .await;
    let task = cluster.finished(&id, COMPILING).await;
    assert_eq!(task.status, TaskStatus::Success, "{task:#?}");
    let sent = server.requests().pop().unwrap();
    assert_eq!(sent.path, format!("/{suffix}"));
    assert_eq!(
        sent.header("authorization"),
        Some(format!("Bearer tok-{suffix}-61c0").as_str())
    );
    assert_eq!(
        sent.header("idempotency-key"),
        Some(format!("waft-{id}-0").as_str())
    );
    let output = String::from_utf8(task.output.unwrap()).unwrap();
    assert!(output.contains("Bearer [redacted]"), "{output}");
}

/// A lambda built against the first contract, `waft:lambda@0.1.0`, deploys
/// and runs beside 0.2.0 ones, its host calls answered: it logs,
/// heartbeats and schedules a child of a 0.2.0 lambda.
pub async fn first_contract(cluster: &Cluster) {
    cluster.deploy("hello", samples::HELLO, |_| {}).await;
    cluster
        .deploy("hello-v0-1", samples::HELLO_V0_1, |c| {
            c.allowed_children = vec!["hello".into()]
        })
        .await;
    let id = cluster.schedule("hello-v0-1", json!("Ada"), None).await;
    let task = cluster.finished(&id, Duration::from_secs(30)).await;
    assert_eq!(task.status, TaskStatus::Success, "{task:#?}");
    assert_eq!(task.output.as_deref(), Some(&b"Hello, Ada!"[..]));
    assert!(task.log.unwrap().contains("greeting"));

    let parent = cluster.schedule("hello-v0-1", json!("child"), None).await;
    let parent = cluster.finished(&parent, Duration::from_secs(30)).await;
    assert_eq!(parent.status, TaskStatus::Success, "{parent:#?}");
    let child = String::from_utf8(parent.output.unwrap()).unwrap();
    let child = cluster.finished(&child, Duration::from_secs(30)).await;
    assert_eq!(child.status, TaskStatus::Success, "{child:#?}");
    assert_eq!(child.parent_id.as_deref(), Some(parent.id.as_str()));
}
