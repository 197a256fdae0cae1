//! A parent started afresh schedules new children: a redrive `--fresh` or
//! onto a version discards its journal, and so does a lambda deployed
//! `--on-divergence restart` whose journal diverged; the children the new
//! run schedules are new tasks that run, not those of the runs before
//! (whose ids and idempotency keys came from the same ranks). A redrive
//! that keeps the journal gets the same children back.

use std::time::Duration;

use serde_json::json;
use waft_core::TaskStatus;
use waft_core::model::TaskList;
use waft_sample_artifacts as samples;
use waft_services::ClientApi;

use crate::support::Cluster;

const WITHIN: Duration = Duration::from_secs(60);

/// The children of `parent` of lambda `lambda`, each once it ended.
async fn ended_children(cluster: &Cluster, parent: &str, lambda: &str) -> Vec<String> {
    let children = cluster
        .frontend
        .task_list(TaskList {
            parent_id: Some(parent.to_owned()),
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut ids = Vec::new();
    for child in children.iter().filter(|t| t.lambda == lambda) {
        let ended = cluster.finished(&child.id, WITHIN).await;
        assert_eq!(
            (ended.status, ended.attempt),
            (TaskStatus::Dead, 1),
            "{ended:#?}"
        );
        ids.push(child.id.clone());
    }
    ids.sort();
    ids
}

/// Redrives `parent` with `flags` and waits until it is dead again.
async fn redrive(cluster: &Cluster, parent: &str, flags: &[&str]) {
    let mut args = vec!["dlq", "redrive", parent];
    args.extend_from_slice(flags);
    let redriven = cluster.cli(&args);
    assert!(redriven.starts_with("1 dead tasks redriven"), "{redriven}");
    let task = cluster.finished(parent, WITHIN).await;
    assert_eq!(task.status, TaskStatus::Dead, "{task:#?}");
}

pub async fn fresh_starts_schedule_new_children(cluster: &Cluster) {
    cluster
        .deploy("gen-child", samples::FLAKY, |c| c.max_attempts = 1)
        .await;
    // The parent waits for its child, which fails, then fails itself,
    // once and for all.
    cluster
        .deploy("gen-parent", samples::CHAIN, |c| {
            c.max_attempts = 1;
            c.allowed_children = vec!["gen-child".into()];
        })
        .await;
    let plan = json!({"wait": true, "fail": true, "children": [
        {"lambda": "gen-child", "payload": {"succeed_on": 5}},
    ]});
    let parent = cluster.schedule("gen-parent", plan, None).await;
    let task = cluster.finished(&parent, WITHIN).await;
    assert_eq!(task.status, TaskStatus::Dead, "{task:#?}");
    let first = ended_children(cluster, &parent, "gen-child").await;
    assert_eq!(first.len(), 1, "{first:?}");

    // Its journal kept: the same child, not scheduled again.
    redrive(cluster, &parent, &[]).await;
    assert_eq!(ended_children(cluster, &parent, "gen-child").await, first);

    // Started afresh: a new child, which runs.
    redrive(cluster, &parent, &["--fresh"]).await;
    let fresh = ended_children(cluster, &parent, "gen-child").await;
    assert_eq!(fresh.len(), 2, "a new child after --fresh: {fresh:?}");
    assert!(fresh.contains(&first[0]), "{fresh:?}");

    // Onto a version: the journal goes too, and so a new child again.
    redrive(cluster, &parent, &["--version", "1"]).await;
    let pinned = ended_children(cluster, &parent, "gen-child").await;
    assert_eq!(pinned.len(), 3, "a new child after --version: {pinned:?}");
}

pub async fn a_restart_on_divergence_schedules_new_children(cluster: &Cluster) {
    cluster
        .deploy("gen-child-2", samples::FLAKY, |c| c.max_attempts = 1)
        .await;
    cluster
        .deploy("gen-restarting", samples::CHAIN, |c| {
            c.max_attempts = 2;
            c.on_divergence = waft_core::OnDivergence::Restart;
            c.allowed_children = vec!["gen-child-2".into()];
        })
        .await;
    // Attempt 2 asks for another child than attempt 1's journal holds: it
    // diverges, discards the journal and starts afresh.
    let plan = json!({"fail": true, "tag_attempt": true, "children": [
        {"lambda": "gen-child-2", "payload": {"succeed_on": 5}},
    ]});
    let parent = cluster.schedule("gen-restarting", plan, None).await;
    let task = cluster.finished(&parent, WITHIN).await;
    assert_eq!(
        (task.status, task.attempt),
        (TaskStatus::Dead, 2),
        "{task:#?}"
    );
    let log = task.log.unwrap_or_default();
    assert!(log.contains("journal was discarded"), "{log}");
    let children = ended_children(cluster, &parent, "gen-child-2").await;
    assert_eq!(
        children.len(),
        2,
        "a new child after the restart: {children:?}"
    );
}
