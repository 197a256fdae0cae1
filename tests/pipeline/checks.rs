//! A deploy checked against the journals of the lambda's waiting tasks
//! (`waft lambda deploy --check`) before it is made: tasks suspended on a
//! signal resume cleanly on the code that wrote their journals, and depart
//! at one entry from code that calls something else there; nothing is
//! deployed either way. Then the tasks moved (`waft lambda move`): none to
//! a version they depart from, all to one they resume cleanly on, where
//! they end.

use std::time::Duration;

use serde_json::json;
use waft_core::TaskStatus;
use waft_sample_artifacts as samples;
use waft_services::ClientApi;

use crate::support::Cluster;

const WITHIN: Duration = Duration::from_secs(60);

/// Where the lambda may call.
const ANYWHERE: &str = "http://127.0.0.1:9";

/// Tasks suspended on a signal.
const WAITING: usize = 12;

pub async fn deploy_check(cluster: &Cluster) {
    // The lambda may call out (it does not, here): its check takes the
    // grant too.
    let v1 = cluster
        .deploy("checked", samples::DURABLE, |c| {
            c.grants.outbound = vec![ANYWHERE.parse().unwrap()];
        })
        .await;
    // Half wait for a signal, half sleep and then wait for it.
    let waits = json!({"signals": ["go"], "signal_ms": 600_000});
    let sleeps = json!({"sleep_ms": 600_000, "signals": ["go"], "signal_ms": 600_000});
    let mut ids = Vec::new();
    for n in 0..WAITING {
        let plan = if n % 2 == 0 { &waits } else { &sleeps };
        ids.push(cluster.schedule("checked", plan.clone(), None).await);
    }
    for id in &ids {
        cluster
            .until(id, WITHIN, |t| t.status == TaskStatus::Suspended)
            .await;
    }

    // The code that wrote the journals: every task resumes cleanly.
    let (code, out) = cluster.cli_exit(&[
        "lambda",
        "deploy",
        "checked",
        samples::DURABLE,
        "--allow-outbound",
        ANYWHERE,
        "--check",
        "--json",
    ]);
    assert_eq!(code, 0, "{out}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["checked"], WAITING, "{report:#}");
    assert_eq!(report["departed"], 0, "{report:#}");
    assert_eq!(report["versions"][0]["version"], v1.version, "{report:#}");
    assert_eq!(report["versions"][0]["clean"], WAITING, "{report:#}");

    // Code whose calls are other ones: every task departs, at one entry.
    let (code, out) = cluster.cli_exit(&[
        "lambda",
        "deploy",
        "checked",
        samples::HELLO,
        "--check",
        "--json",
    ]);
    assert_eq!(code, 26, "{out}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["departed"], WAITING, "{report:#}");
    let version = &report["versions"][0];
    assert_eq!(version["clean"], 0, "{report:#}");
    let departures = version["departures"].as_array().unwrap();
    assert_eq!(departures.len(), 1, "{report:#}");
    assert_eq!(departures[0]["count"], WAITING, "{report:#}");
    let mut named: Vec<String> = departures[0]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap().to_owned())
        .collect();
    named.sort();
    let mut waiting = ids.clone();
    waiting.sort();
    assert_eq!(named, waiting, "{report:#}");
    // For a person: the count, the entry and both sides of it.
    let (code, text) =
        cluster.cli_exit(&["lambda", "deploy", "checked", samples::HELLO, "--check"]);
    assert_eq!(code, 26, "{text}");
    eprint!("{text}");
    assert!(text.contains(&format!("{WAITING} depart")), "{text}");
    assert!(text.contains("the journal has"), "{text}");

    // A check deploys nothing.
    let current = cluster.frontend.lambda_get("checked", None).await.unwrap();
    assert_eq!(current.version, v1.version);
    // A lambda that does not exist has nothing to check.
    let (code, _) = cluster.cli_failing(&[
        "lambda",
        "deploy",
        "nothing-here",
        samples::HELLO,
        "--check",
    ]);
    assert_eq!(code, 4);

    // Version 2 is the same code, version 3 other code, and current.
    let v2 = cluster
        .deploy("checked", samples::DURABLE, |c| {
            c.grants.outbound = vec![ANYWHERE.parse().unwrap()];
        })
        .await;
    let v3 = cluster.deploy("checked", samples::HELLO, |_| {}).await;
    let (code, out) = cluster.cli_exit(&["lambda", "move", "checked", "--json"]);
    assert_eq!(code, 26, "{out}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (&report["to"], &report["moved"], &report["departed"]),
        (&json!(v3.version), &json!(0), &json!(WAITING)),
        "{report:#}"
    );
    let to = v2.version.to_string();
    let (code, out) = cluster.cli_exit(&["lambda", "move", "checked", "--to", &to, "--json"]);
    assert_eq!(code, 0, "{out}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["moved"], WAITING, "{report:#}");
    // Version 2 is what they need now, version 1 nothing.
    let versions = cluster.cli(&["lambda", "versions", "checked", "--json"]);
    let versions: serde_json::Value = serde_json::from_str(&versions).unwrap();
    let needed: Vec<(u64, u64)> = versions
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            let version = v["version"].as_u64().unwrap();
            (version, v["suspended_tasks"].as_u64().unwrap())
        })
        .collect();
    assert_eq!(
        needed,
        [
            (u64::from(v1.version), 0),
            (u64::from(v2.version), WAITING as u64),
            (u64::from(v3.version), 0)
        ],
        "{versions:#}"
    );
    // Moved, they end on the code they were checked against, not the
    // current one.
    let (waiting, sleeping): (Vec<_>, Vec<_>) =
        ids.iter().enumerate().partition(|(n, _)| n % 2 == 0);
    for (_, id) in &waiting {
        cluster
            .frontend
            .task_signal(id, "go", b"now".to_vec())
            .await
            .unwrap();
    }
    for (_, id) in &waiting {
        let task = cluster.finished(id, WITHIN).await;
        assert_eq!(task.status, TaskStatus::Success, "{task:#?}");
        let output: serde_json::Value = serde_json::from_slice(&task.output.unwrap()).unwrap();
        assert_eq!(output["signals"], json!(["now"]), "{output}");
    }
    for (_, id) in &sleeping {
        cluster.frontend.task_cancel(id).await.unwrap();
    }
}
