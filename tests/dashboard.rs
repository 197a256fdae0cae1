//! The dashboard in a real browser against a real `waft dev`: headless
//! Chromium runs the scripts in `host/dashboard/web/test/` (Node and
//! playwright-core), which act on the page and check what it did with the
//! CLI. This harness sets the installation up and runs them.
//!
//! - `the_night_time_incident_from_the_page` (`incident.mjs`): overview,
//!   a failed attempt's log, pause (tasks held, checked by the CLI), fix,
//!   resume, bulk redrive (the dead tasks re-run), then every other page,
//!   a task's journal among them (checked against `waft task journal`).
//! - `with_auth_a_scheduler_token_cannot_pause` (`auth.mjs`).
//!
//! Each page's screenshot goes to `target/screenshots/` (or
//! `WAFT_SCREENSHOTS`); docs/dashboard.md shows the main ones.

mod support;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;
use support::Cluster;
use waft_core::TaskStatus;
use waft_sample_artifacts as samples;
use waft_services::ClientApi;
use waft_store::{StatusCount, TaskCount};

fn screenshots() -> PathBuf {
    std::env::var_os("WAFT_SCREENSHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/screenshots")
        })
}

/// Runs a browser script against `cluster`; fails with its output.
fn run(browser: &waft_testing::Browser, script: &str, cluster: &Cluster, extra: &[(&str, &str)]) {
    let mut command = browser.script(script);
    command
        .env("WAFT_URL", format!("http://{}", cluster.frontend_addr))
        .env("WAFT_SERVER", &cluster.frontend_addr)
        .env("WAFT_BIN", env!("CARGO_BIN_EXE_waft"))
        .env("WAFT_HELLO", samples::HELLO)
        .env("WAFT_SCREENSHOTS", screenshots());
    if let Some(token) = &cluster.token {
        command.env("WAFT_TOKEN", token);
    }
    for (key, value) in extra {
        command.env(key, value);
    }
    let output = command.output().expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "{script} failed:\n{stdout}\n{stderr}\n--- waft dev's log ---\n{}",
        cluster.logs()
    );
}

/// `mailer` fails its one attempt: three dead letters. `hello` and a
/// finished `chain` parent with two children give the other pages data;
/// `approval` (the durable sample) waits for signals; a `script` task drew
/// 450 random numbers, a journal of three pages.
async fn incident(cluster: &Cluster) {
    cluster
        .deploy("approval", samples::DURABLE, |c| {
            // It calls out only when its payload names a URL; none does here.
            c.grants.outbound = vec!["http://127.0.0.1:9".parse().unwrap()];
        })
        .await;
    cluster
        .deploy("mailer", samples::FLAKY, |c| c.max_attempts = 1)
        .await;
    cluster.deploy("hello", samples::HELLO, |_| {}).await;
    cluster
        .deploy("chain", samples::CHAIN, |c| {
            c.allowed_children = vec!["hello".into()];
        })
        .await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let payload = json!({"succeed_on": 5, "note": " smtp timeout"});
        ids.push(cluster.schedule("mailer", payload, None).await);
    }
    let names = json!({"lambda": "hello", "names": ["Ada", "Grace"]});
    ids.push(cluster.schedule("chain", names, None).await);
    cluster
        .deploy("script", samples::SCRIPT, |c| {
            // Its program here calls nothing outside.
            c.grants.outbound = vec!["http://127.0.0.1:9".parse().unwrap()];
        })
        .await;
    let draws = json!({"steps": vec!["random"; 450]});
    ids.push(cluster.schedule("script", draws, None).await);
    for id in &ids {
        cluster.finished(id, Duration::from_secs(30)).await;
    }
    let counts = cluster
        .frontend
        .task_count(TaskCount {
            lambda: "mailer".into(),
            ..TaskCount::default()
        })
        .await
        .unwrap();
    let dead = StatusCount {
        status: TaskStatus::Dead,
        count: 3,
    };
    assert_eq!(counts, vec![dead], "three dead letters to redrive");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_night_time_incident_from_the_page() {
    let Some(browser) = waft_testing::browser() else {
        return;
    };
    let cluster = Cluster::dev().await;
    incident(&cluster).await;
    run(&browser, "incident.mjs", &cluster, &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_auth_a_scheduler_token_cannot_pause() {
    let Some(browser) = waft_testing::browser() else {
        return;
    };
    let cluster = Cluster::dev_with(true).await;
    incident(&cluster).await;
    let created = cluster.cli(&[
        "token",
        "create",
        "night-shift",
        "--role",
        "scheduler",
        "--lambda",
        "mailer",
        "--json",
    ]);
    let created: serde_json::Value = serde_json::from_str(&created).unwrap();
    let secret = created["secret"].as_str().expect("a secret");
    run(
        &browser,
        "auth.mjs",
        &cluster,
        &[("WAFT_SCHEDULER_TOKEN", secret)],
    );
}
