//! Tasks that schedule tasks: a lambda's children, stored under the ids it
//! was told and shown by `waft task tree`, `logs` and `journal`; a child of
//! a lambda it was not allowed, refused; and a continuation declared at
//! schedule time, run with its parent's output.

use serde_json::json;

use waft_core::TaskStatus;
use waft_sample_artifacts as samples;
use waft_services::ClientApi;
use waft_store::TaskList;

use super::helpers::WITHIN;
use crate::support::Cluster;

pub async fn chaining(cluster: &Cluster) {
    let id = cluster
        .schedule(
            "chain",
            json!({"lambda": "hello", "names": ["v", "w", "x", "y", "z"], "key": "chain acme/é"}),
            None,
        )
        .await;
    let parent = cluster.finished(&id, WITHIN).await;
    assert_eq!(parent.status, TaskStatus::Success, "{parent:#?}");
    let children = cluster
        .frontend
        .task_list(TaskList {
            parent_id: Some(id.clone()),
            ..TaskList::default()
        })
        .await
        .unwrap();
    assert_eq!(children.len(), 5);
    // The first child is written at once, the others in a batch: each
    // under the id the lambda was told.
    let output: serde_json::Value =
        serde_json::from_slice(parent.output.as_deref().unwrap()).unwrap();
    let mut told: Vec<&str> = output["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap())
        .collect();
    let mut stored: Vec<&str> = children.iter().map(|child| child.id.as_str()).collect();
    told.sort_unstable();
    stored.sort_unstable();
    assert_eq!(told, stored);
    for child in children {
        let child = cluster.finished(&child.id, WITHIN).await;
        assert_eq!(child.status, TaskStatus::Success);
        assert_eq!(child.parent_id.as_deref(), Some(id.as_str()));
        assert_eq!(child.key.as_deref(), Some("chain acme/é"));
    }
    // Listed by their key, through the CLI too.
    let keyed = cluster.cli(&[
        "task",
        "list",
        "--lambda",
        "hello",
        "--key",
        "chain acme/é",
        "--json",
    ]);
    let keyed: serde_json::Value = serde_json::from_str(&keyed).unwrap();
    assert_eq!(keyed.as_array().unwrap().len(), 5, "{keyed}");

    // The CLI shows the chain and the parent's log.
    let tree = cluster.cli(&["task", "tree", &id, "--json"]);
    let tree: serde_json::Value = serde_json::from_str(&tree).unwrap();
    assert_eq!(tree["status"], "success");
    let children = tree["children"].as_array().unwrap();
    assert_eq!(children.len(), 5);
    assert!(children.iter().all(|c| c["status"] == "success"));
    let logs = cluster.cli(&["task", "logs", &id]);
    assert!(logs.contains("scheduled 5 children"), "{logs}");
    // Its journal: the five children, made live by its one attempt.
    let journal = cluster.cli(&["task", "journal", &id, "--json"]);
    let journal: serde_json::Value = serde_json::from_str(&journal).unwrap();
    let scheduled: Vec<&serde_json::Value> = journal["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["call"] == "waft:lambda/children.schedule")
        .collect();
    assert_eq!(scheduled.len(), 5, "{journal:#}");
    for entry in scheduled {
        assert_eq!(
            (
                &entry["live_attempt"],
                &entry["replayed_by"],
                &entry["outside"]
            ),
            (&json!(1), &json!([]), &json!(true)),
            "{journal:#}"
        );
    }
    let table = cluster.cli(&["task", "journal", &id]);
    assert!(
        table.starts_with("SEQ") && table.contains("live #1"),
        "{table}"
    );
    // A lambda deployed to restart on divergence says so.
    let deployed = cluster.cli(&[
        "lambda",
        "deploy",
        "chain-restarting",
        samples::CHAIN,
        "--on-divergence",
        "restart",
        "--json",
    ]);
    let deployed: serde_json::Value = serde_json::from_str(&deployed).unwrap();
    assert_eq!(
        deployed["config"]["on_divergence"], "restart",
        "{deployed:#}"
    );
    let shown = cluster.cli(&["lambda", "get", "chain", "--json"]);
    let shown: serde_json::Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(shown["config"]["on_divergence"], "fail", "{shown:#}");

    // Children of a lambda it was not allowed are refused, and the task's
    // log says what to grant.
    let id = cluster
        .schedule("chain", json!({"lambda": "fatal", "names": ["x"]}), None)
        .await;
    let parent = cluster.finished(&id, WITHIN).await;
    assert_eq!(parent.status, TaskStatus::FatalFailure, "{parent:#?}");
    let logs = cluster.cli(&["task", "logs", &id]);
    assert!(
        logs.contains("refused to schedule a child") && logs.contains("--allow-child fatal"),
        "{logs}"
    );

    // A continuation declared at schedule time runs with the output.
    let first = cluster.cli(&[
        "task",
        "schedule",
        "hello",
        "--payload",
        r#"{"name": "Ada"}"#,
        "--then",
        "hello",
    ]);
    let first = cluster.finished(first.trim(), WITHIN).await;
    assert_eq!(first.status, TaskStatus::Success);
    let shown: serde_json::Value =
        serde_json::from_str(&cluster.cli(&["task", "get", &first.id, "--json"])).unwrap();
    assert_eq!(shown["then"]["lambda"], "hello");
    let children = shown["children"].as_array().unwrap();
    assert_eq!(children.len(), 1, "{shown:#}");
    let next = cluster
        .finished(children[0].as_str().unwrap(), WITHIN)
        .await;
    assert_eq!(next.status, TaskStatus::Success, "{next:#?}");
    assert_eq!(Some(next.payload), first.output);
    assert_eq!(next.parent_id, Some(first.id));
}
