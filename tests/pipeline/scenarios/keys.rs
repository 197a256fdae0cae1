//! Flow control per key, deployed from the CLI: one lambda's tasks limited
//! per key in concurrency or rate, debounced into one task, or served
//! fairly between keys; a task held back says what it waits for, and keys
//! do not hold each other back.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;

use waft_core::TaskStatus;
use waft_sample_artifacts as samples;
use waft_services::{ClientApi, TaskRequest};

use super::helpers::{WITHIN, scrape, total};
use crate::support::Cluster;

/// A lambda's concurrency per key: tasks of one key run one after another
/// (`--key-concurrency 1`), whichever executor takes them, a waiting one
/// shows it is parked, and every task ends.
pub async fn key_concurrency(cluster: &Cluster) {
    cluster
        .deploy("per-customer", samples::SLEEPY, |c| {
            c.key_concurrency = Some(1)
        })
        .await;
    let keys = ["acme", "globex", "acme", "globex", "acme"];
    let ids = schedule_keyed(
        cluster,
        "per-customer",
        &keys,
        |_| json!({"steps": 3, "step_ms": 100}),
    )
    .await;
    // Two of acme's three tasks wait while one runs: one of them is seen
    // parked, and says what it waits for (which goes first among tasks
    // scheduled in one millisecond is their ids' order, not the request's).
    let parked = seen_waiting(
        cluster,
        "per-customer",
        "acme",
        "waiting for a free place for key \"acme\"",
        2,
    )
    .await;
    let acme = ids.iter().zip(keys).filter(|(_, key)| *key == "acme");
    assert!(acme.map(|(id, _)| id).any(|id| *id == parked), "{parked}");

    let mut ended = Vec::new();
    for id in &ids {
        let task = cluster.finished(id, WITHIN).await;
        assert_eq!(
            (task.status, task.attempt),
            (TaskStatus::Success, 1),
            "{task:#?}"
        );
        ended.push(task);
    }
    let limited = total(
        &scrape(cluster).await,
        r#"waft_tasks_limited_total{lambda="per-customer",limit="key_concurrency"}"#,
    );
    assert!(limited >= 2.0, "two of acme's tasks were parked: {limited}");
    for key in ["acme", "globex"] {
        let mut runs: Vec<(i64, i64)> = ended
            .iter()
            .filter(|task| task.key.as_deref() == Some(key))
            .map(|task| (task.claimed_at.unwrap(), task.finished_at.unwrap()))
            .collect();
        runs.sort_unstable();
        for pair in runs.windows(2) {
            assert!(
                pair[0].1 <= pair[1].0,
                "two tasks of {key} ran at once: {runs:?}"
            );
        }
    }
}

/// A rate per key, deployed from the CLI: a key's tasks start at most at
/// its rate (two at once, then one a second), each waiting one says so, and
/// other keys are not held back.
pub async fn key_rate(cluster: &Cluster) {
    cluster.cli(&[
        "lambda",
        "deploy",
        "per-key-rate",
        samples::HELLO,
        "--key-rate",
        "2/2s",
    ]);
    let shown: serde_json::Value =
        serde_json::from_str(&cluster.cli(&["lambda", "get", "per-key-rate", "--json"])).unwrap();
    assert_eq!(shown["config"]["key_rate"], json!("2/2s"));
    let (code, error) = cluster.cli_failing(&[
        "lambda",
        "deploy",
        "per-key-rate",
        samples::HELLO,
        "--key-rate",
        "2/never",
    ]);
    assert_eq!(code, 2, "{error}");
    assert!(error.contains("COUNT/PERIOD"), "{error}");

    let keys = ["acme", "acme", "acme", "acme", "globex"];
    let ids = schedule_keyed(cluster, "per-key-rate", &keys, |key| json!({"name": key})).await;
    seen_waiting(
        cluster,
        "per-key-rate",
        "acme",
        "waiting for its slot of key \"acme\"'s rate",
        4,
    )
    .await;

    let mut enqueued = BTreeMap::<&str, Vec<i64>>::new();
    for (id, key) in ids.iter().zip(keys) {
        let task = cluster.finished(id, WITHIN).await;
        assert_eq!(
            (task.status, task.attempt),
            (TaskStatus::Success, 1),
            "{task:#?}"
        );
        enqueued
            .entry(key)
            .or_default()
            .push(task.enqueued_at.unwrap());
    }
    // Slots: the first two at once, then one each second.
    // The consumers counted the two tasks they held back (more only if a
    // message expired unclaimed on a very busy machine).
    let limited = total(
        &scrape(cluster).await,
        r#"waft_tasks_limited_total{lambda="per-key-rate",limit="key_rate"}"#,
    );
    assert!(limited >= 2.0, "{limited}");
    let globex = enqueued["globex"][0];
    let acme = enqueued.get_mut("acme").unwrap();
    acme.sort_unstable();
    assert!(acme[2] - acme[0] >= 1_000, "acme enqueued at {acme:?}");
    assert!(acme[3] - acme[0] >= 2_000, "acme enqueued at {acme:?}");
    assert!(
        globex - acme[0] < 1_000,
        "globex at {globex}, acme {acme:?}"
    );
}

/// Debounce from the CLI: three debounced tasks of one key answer one id,
/// which waits for its window, says so, and runs once with the last
/// payload; a task of another key is apart.
pub async fn debounce(cluster: &Cluster) {
    let schedule = |key: &str, name: &str| {
        let payload = json!({ "name": name }).to_string();
        let shown = cluster.cli(&[
            "task",
            "schedule",
            "hello",
            "--key",
            key,
            "--debounce",
            "3s",
            "--payload",
            &payload,
            "--json",
        ]);
        let shown: serde_json::Value = serde_json::from_str(&shown).unwrap();
        (
            shown["id"].as_str().unwrap().to_owned(),
            shown["created"].as_bool().unwrap(),
        )
    };
    let (first, created) = schedule("doc-1", "first edit");
    assert!(created);
    let waiting = cluster.cli(&["task", "get", &first]);
    assert!(
        waiting.contains("its debounce window: key \"doc-1\"'s debounced tasks collapse into it"),
        "{waiting}"
    );
    assert_eq!(schedule("doc-1", "second edit"), (first.clone(), false));
    assert_eq!(schedule("doc-1", "last edit"), (first.clone(), false));
    let (other, created) = schedule("doc-2", "another");
    assert!(created && other != first);
    let (code, error) = cluster.cli_failing(&["task", "schedule", "hello", "--debounce", "1s"]);
    assert_eq!(code, 2, "{error}");
    assert!(error.contains("--key"), "{error}");

    let task = cluster.finished(&first, WITHIN).await;
    assert_eq!(
        (task.status, task.attempt),
        (TaskStatus::Success, 1),
        "{task:#?}"
    );
    let output: serde_json::Value =
        serde_json::from_slice(task.output.as_deref().unwrap()).unwrap();
    assert_eq!(output, json!({"greeting": "Hello, last edit!"}));
    assert!(
        task.enqueued_at.unwrap() >= task.created_at + 3_000,
        "{task:#?}"
    );
    let other = cluster.finished(&other, WITHIN).await;
    assert_eq!(other.status, TaskStatus::Success);
}

/// Fairness between keys, deployed from the CLI with its lookahead: a task
/// of one key scheduled behind a backlog of another starts long before the
/// backlog ends, the backlog's waiting tasks say they await their key's
/// turn, and every task ends.
pub async fn key_fairness(cluster: &Cluster) {
    const BACKLOG: usize = 1200;
    cluster.cli(&[
        "lambda",
        "deploy",
        "fair",
        samples::HELLO,
        "--key-fairness",
        "--key-weight",
        "gold=2",
        "--key-lookahead",
        "200",
    ]);
    let shown: serde_json::Value =
        serde_json::from_str(&cluster.cli(&["lambda", "get", "fair", "--json"])).unwrap();
    assert_eq!(
        shown["config"]["key_fairness"],
        json!({"weights": {"gold": 2}, "lookahead": 200})
    );
    let (code, error) = cluster.cli_failing(&[
        "lambda",
        "deploy",
        "fair",
        samples::HELLO,
        "--key-lookahead",
        "0",
    ]);
    assert_eq!(code, 2, "{error}");
    assert!(error.contains("--key-lookahead"), "{error}");
    let (code, error) = cluster.cli_failing(&[
        "lambda",
        "deploy",
        "fair",
        samples::HELLO,
        "--key-weight",
        "gold=0",
    ]);
    assert_eq!(code, 2, "{error}");
    assert!(error.contains("KEY=WEIGHT"), "{error}");

    let bulk = schedule_keyed(
        cluster,
        "fair",
        &["bulk"; BACKLOG],
        |_| json!({"name": "bulk"}),
    )
    .await;
    let urgent = schedule_keyed(cluster, "fair", &["urgent"], |_| json!({"name": "urgent"})).await;
    // The backlog's last task (they go oldest first, ties by id) waits
    // for its key's turn, and says so.
    let last = bulk.iter().max().unwrap();
    let shown = cluster.cli(&["task", "get", last]);
    assert!(
        shown.contains("key \"bulk\"'s turn (the lambda is fair"),
        "{shown}"
    );
    let urgent = cluster.finished(&urgent[0], WITHIN).await;
    assert_eq!(urgent.status, TaskStatus::Success, "{urgent:#?}");
    let mut after = 0;
    for id in &bulk {
        let task = cluster.finished(id, WITHIN).await;
        assert_eq!(task.status, TaskStatus::Success, "{task:#?}");
        after += usize::from(task.claimed_at > urgent.claimed_at);
    }
    // First come, first served, it would start after every one of them.
    assert!(
        after >= 300,
        "only {after} of the backlog's {BACKLOG} tasks started after the other key's"
    );
}

/// Schedules a task of `lambda` for each of `keys`, in one batch, each
/// with the payload `payload` makes of its key; their ids, in order.
async fn schedule_keyed(
    cluster: &Cluster,
    lambda: &str,
    keys: &[&str],
    payload: impl Fn(&str) -> serde_json::Value,
) -> Vec<String> {
    let requests = keys
        .iter()
        .map(|key| TaskRequest {
            lambda: lambda.into(),
            payload: payload(key).to_string().into_bytes(),
            key: Some((*key).into()),
            ..TaskRequest::default()
        })
        .collect();
    cluster
        .frontend
        .task_schedule_many(requests)
        .await
        .unwrap()
        .into_iter()
        .map(|task| task.id)
        .collect()
}

/// The id of the first of `lambda`'s tasks of `key` that `waft task list`
/// shows `waiting` (the words it prints), looked for until seen; fails
/// once `ended` of them have succeeded without one being seen.
async fn seen_waiting(
    cluster: &Cluster,
    lambda: &str,
    key: &str,
    waiting: &str,
    ended: usize,
) -> String {
    let seen = async {
        loop {
            let listed = cluster.cli(&["task", "list", "--lambda", lambda, "--key", key]);
            if let Some(line) = listed.lines().find(|line| line.contains(waiting)) {
                return line.split_whitespace().next().unwrap().to_owned();
            }
            let succeeded = listed
                .lines()
                .filter(|line| line.contains(" success "))
                .count();
            assert!(
                succeeded < ended,
                "{succeeded} of {key}'s tasks ended before one was seen {waiting}:\n{listed}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(WITHIN, seen).await.unwrap()
}
