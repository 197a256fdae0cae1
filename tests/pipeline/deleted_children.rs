//! A parent of one lambda waiting for children of others, whose owners
//! delete them under it: a lambda deleted once its tasks ended, a lambda
//! deleted with its tasks (`--drop-tasks`) while the parent is suspended,
//! a dead child purged (`waft dlq purge`). The parent learns how each
//! ended and ends itself; it neither hangs nor fails on a child it can no
//! longer find.

use std::time::Duration;

use serde_json::{Value, json};
use waft_core::TaskStatus;
use waft_core::model::TaskList;
use waft_sample_artifacts as samples;
use waft_services::ClientApi;

use crate::support::Cluster;

const WITHIN: Duration = Duration::from_secs(60);

/// The ids of `parent`'s children of `lambda`, once it scheduled them.
async fn child_of(cluster: &Cluster, parent: &str, lambda: &str) -> String {
    let deadline = std::time::Instant::now() + WITHIN;
    loop {
        let children = cluster
            .frontend
            .task_list(TaskList {
                parent_id: Some(parent.to_owned()),
                limit: 100,
                ..Default::default()
            })
            .await
            .unwrap();
        if let Some(child) = children.iter().find(|t| t.lambda == lambda) {
            return child.id.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{parent} scheduled no task of {lambda}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The ends the `chain` sample returned.
fn ends_of(output: Option<Vec<u8>>) -> Vec<Value> {
    let output: Value = serde_json::from_slice(&output.expect("an output")).unwrap();
    output["ends"].as_array().expect("ends").clone()
}

pub async fn deleted_children(cluster: &Cluster) {
    cluster.deploy("gone-hello", samples::HELLO, |_| {}).await;
    cluster
        .deploy("gone-flaky", samples::FLAKY, |c| c.max_attempts = 1)
        .await;
    cluster.deploy("gone-sleepy", samples::SLEEPY, |_| {}).await;
    cluster.deploy("kept-sleepy", samples::SLEEPY, |_| {}).await;
    cluster
        .deploy("orphaned", samples::CHAIN, |c| {
            c.allowed_children = ["gone-hello", "gone-flaky", "gone-sleepy", "kept-sleepy"]
                .map(String::from)
                .to_vec();
        })
        .await;

    // Two children end (one dead) while a third keeps the parent waiting;
    // their lambda is deleted without --drop-tasks, the dead one purged.
    let plan = json!({"wait": true, "children": [
        {"lambda": "gone-hello", "payload": {"name": "early"}},
        {"lambda": "gone-flaky", "payload": {"succeed_on": 5}},
        {"lambda": "kept-sleepy", "payload": {"steps": 100, "step_ms": 100}},
    ]});
    let parent = cluster.schedule("orphaned", plan, None).await;
    let hello = child_of(cluster, &parent, "gone-hello").await;
    let flaky = child_of(cluster, &parent, "gone-flaky").await;
    let sleeper = child_of(cluster, &parent, "kept-sleepy").await;
    cluster.finished(&hello, WITHIN).await;
    let dead = cluster.finished(&flaky, WITHIN).await;
    assert_eq!(dead.status, TaskStatus::Dead, "{dead:#?}");
    cluster.cli(&["lambda", "delete", "gone-hello"]);
    cluster.cli(&["dlq", "purge", &flaky]);
    let waiting = cluster.frontend.task_get(&sleeper).await.unwrap();
    assert!(
        !waiting.status.is_terminal(),
        "the sleeper ended before the deletes: nothing was checked"
    );
    let task = cluster.finished(&parent, WITHIN).await;
    assert_eq!(task.status, TaskStatus::Success, "{task:#?}");
    let ends = ends_of(task.output);
    let statuses: Vec<_> = ends.iter().map(|e| e["status"].as_str()).collect();
    assert_eq!(
        statuses,
        [Some("Success"), Some("Dead"), Some("Success")],
        "{ends:#?}"
    );
    assert!(
        ends[0]["output"].as_str().unwrap().contains("early"),
        "{ends:#?}"
    );

    // A child still running when its lambda is deleted with its tasks
    // ends, dropped, for the suspended parent.
    let plan = json!({"wait": true, "children": [
        {"lambda": "gone-sleepy", "payload": {"steps": 600, "step_ms": 100}},
    ]});
    let parent = cluster.schedule("orphaned", plan, None).await;
    cluster
        .until(&parent, WITHIN, |t| t.status == TaskStatus::Suspended)
        .await;
    cluster.cli(&["lambda", "delete", "gone-sleepy", "--drop-tasks"]);
    let task = cluster.finished(&parent, WITHIN).await;
    assert_eq!(task.status, TaskStatus::Success, "{task:#?}");
    let ends = ends_of(task.output);
    assert_eq!(ends[0]["status"], "Dropped", "{ends:#?}");
    let why = ends[0]["error"].as_str().unwrap_or_default();
    assert!(why.contains("deleted"), "{ends:#?}");
}
