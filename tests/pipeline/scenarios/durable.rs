//! The journal of durable execution: a crashed attempt's calls answered
//! from it on the next attempt, each outside call made once, as `waft task
//! journal` shows; and a journal exported from a task, replayed locally
//! with `waft invoke --replay`. Durable waits (sleep, signals, fan-in) are
//! in `pipeline/waits.rs`.

use serde_json::json;

use waft_core::TaskStatus;
use waft_sample_artifacts as samples;
use waft_services::ClientApi;
use waft_store::TaskList;

use super::helpers::WITHIN;
use crate::support::Cluster;

/// A durable lambda posts three times, then crashes on its first attempt;
/// its second attempt is answered from the journal and succeeds: the server
/// saw each of the three posts once, and the fourth once. Its child was
/// scheduled once. `waft task journal` tells live entries from replayed
/// ones; a redrive `--fresh` would discard the journal.
pub async fn durable(cluster: &Cluster) {
    use waft_testing::http::{HttpServer, Reply};

    let server =
        HttpServer::start(|request| Reply::status(200, &format!("{} bytes", request.body.len())))
            .await;
    let url = server.url();
    cluster
        .deploy("durable", samples::DURABLE, |c| {
            c.grants.outbound = vec![url.parse().unwrap()];
            c.grants.env.insert("REGION".into(), "eu-west-1".into());
        })
        .await;
    let plan = json!({"url": url, "posts": 4, "crash_after": 3, "children": 1});
    let id = cluster.schedule("durable", plan, None).await;
    let task = cluster.finished(&id, WITHIN).await;
    assert_eq!(
        (task.status, task.attempt),
        (TaskStatus::Success, 2),
        "{task:#?}"
    );
    let mut posts: Vec<u64> = server
        .requests()
        .iter()
        .map(|r| {
            serde_json::from_slice::<serde_json::Value>(&r.body).unwrap()["n"]
                .as_u64()
                .unwrap()
        })
        .collect();
    posts.sort_unstable();
    assert_eq!(posts, [0, 1, 2, 3], "each post reached the server once");
    let output: serde_json::Value = serde_json::from_slice(&task.output.unwrap()).unwrap();
    let child = output["children"][0].as_str().unwrap().to_owned();
    let children = cluster
        .frontend
        .task_list(TaskList {
            parent_id: Some(id.clone()),
            ..TaskList::default()
        })
        .await
        .unwrap();
    assert_eq!(children.len(), 1, "{children:#?}");
    assert_eq!(children[0].id, child);

    let journal = cluster.frontend.task_journal(&id, false).await.unwrap();
    let http: Vec<_> = journal
        .iter()
        .filter(|e| e.call == "wasi:http/outgoing-handler.handle")
        .collect();
    assert_eq!(http.len(), 4, "{journal:#?}");
    assert_eq!(
        http.iter().map(|e| e.attempt).collect::<Vec<_>>(),
        [1, 1, 1, 2]
    );
    assert!(
        journal.iter().all(|e| e.answer.is_empty()),
        "no answers for people"
    );
    // The three posts before the crash were replayed by attempt 2; the
    // fourth was made live by it.
    let shown = cluster.cli(&["task", "journal", &id]);
    let posts: Vec<&str> = shown
        .lines()
        .filter(|line| line.contains("wasi:http/outgoing-handler.handle"))
        .collect();
    assert_eq!(posts.len(), 4, "{shown}");
    assert!(
        posts[..3]
            .iter()
            .all(|l| l.contains("live #1, replayed #2")),
        "{shown}"
    );
    assert!(
        posts[3].contains("live #2") && !posts[3].contains("replayed"),
        "{shown}"
    );
}

/// Replay as a debugger: a durable task's journal, exported with `waft
/// task journal ID --json`, runs the lambda locally with `waft invoke
/// --replay` to the same outcome with no request sent; a payload that makes
/// another call is reported with the entry it diverged at; a journal cut
/// short stops where it ends (or goes on live with `--then live`); a bad
/// file is a usage error.
pub async fn replay_locally(cluster: &Cluster) {
    use waft_testing::http::{HttpServer, Reply};

    let server =
        HttpServer::start(|request| Reply::status(200, &format!("{} bytes", request.body.len())))
            .await;
    let url = server.url();
    cluster
        .deploy("replayed", samples::DURABLE, |c| {
            c.grants.outbound = vec![url.parse().unwrap()];
            c.grants.env.insert("REGION".into(), "eu-west-1".into());
        })
        .await;
    let plan = json!({"url": url, "posts": 3, "crash_after": 2});
    let id = cluster.schedule("replayed", plan.clone(), None).await;
    let task = cluster.finished(&id, WITHIN).await;
    assert_eq!(
        (task.status, task.attempt),
        (TaskStatus::Success, 2),
        "{task:#?}"
    );
    assert_eq!(server.requests().len(), 3);

    let exported = cluster.cli(&["task", "journal", &id, "--json"]);
    let document: serde_json::Value = serde_json::from_str(&exported).unwrap();
    assert_eq!(document["task"]["id"], id.as_str());
    assert_eq!(document["task"]["attempts"], 2);
    let entries = document["entries"].as_array().unwrap().clone();
    let posts: Vec<u64> = entries
        .iter()
        .filter(|e| e["call"] == "wasi:http/outgoing-handler.handle")
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(posts.len(), 3, "{document:#}");
    assert!(
        entries.iter().all(|e| e["answer"].as_str().is_some()),
        "{document:#}"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("journal.json");
    std::fs::write(&file, &exported).unwrap();
    let file = file.to_str().unwrap();
    let invoke = |args: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_waft"))
            .arg("invoke")
            .arg(samples::DURABLE)
            .args(args)
            .output()
            .expect("waft runs");
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };

    // The whole attempt, answered from the journal: its output, and not
    // one request more.
    let (code, stdout, stderr) = invoke(&["--replay", file, "--json"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["outcome"], "success", "{report:#}");
    let output: serde_json::Value = serde_json::from_slice(task.output.as_ref().unwrap()).unwrap();
    assert_eq!(report["output"], output, "{report:#}");
    assert_eq!(report["replay"]["replayed"], entries.len(), "{report:#}");
    assert_eq!(server.requests().len(), 3, "the replay sent nothing");
    let (code, text, _) = invoke(&["--replay", file]);
    assert_eq!(code, 0, "{text}");
    let replayed = format!("replay: {n} of {n} journal entries", n = entries.len());
    assert!(text.contains(&replayed), "{text}");

    // Another URL: the first post diverges, and says where and how.
    let other = json!({"url": format!("{url}/other"), "posts": 3, "crash_after": 2}).to_string();
    let (code, text, _) = invoke(&["--replay", file, "--payload", &other]);
    assert_eq!(code, 24, "{text}");
    let diverged = format!("diverged at entry {}", posts[0]);
    assert!(text.contains(&diverged), "{text}");
    assert!(
        text.contains("the journal has wasi:http/outgoing-handler.handle"),
        "{text}"
    );
    assert_eq!(
        server.requests().len(),
        3,
        "nothing goes out after a mismatch"
    );

    // Cut before the last post: stopped there, or on live with a grant.
    let mut cut = document.clone();
    cut["entries"] = json!(entries[..posts[2] as usize]);
    let cut_file = dir.path().join("cut.json");
    std::fs::write(&cut_file, cut.to_string()).unwrap();
    let cut_file = cut_file.to_str().unwrap();
    let (code, text, _) = invoke(&["--replay", cut_file]);
    assert_eq!(code, 0, "{text}");
    let ends = format!(
        "the journal ends at entry {}: the lambda's next call, wasi:http/outgoing-handler.handle",
        posts[2]
    );
    assert!(text.contains(&ends), "{text}");
    assert_eq!(server.requests().len(), 3, "stopped before the post");
    let (code, text, _) = invoke(&[
        "--replay",
        cut_file,
        "--then",
        "live",
        "--allow-outbound",
        &url,
        "--env",
        "REGION=eu-west-1",
    ]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("outcome: success"), "{text}");
    assert!(text.contains("went on live"), "{text}");
    let requests = server.requests();
    assert_eq!(requests.len(), 4, "the last post, live");
    assert_eq!(
        requests[3].header("idempotency-key"),
        requests[2].header("idempotency-key"),
        "the same key as the task's own post"
    );

    // Bad files: a usage error that says what to do.
    let bad = dir.path().join("bad.json");
    for (content, says) in [
        ("{not json", "not JSON"),
        ("[]", "without their answers"),
        (
            r#"{"format":"waft-journal/1","task":{}}"#,
            "not a whole journal document",
        ),
    ] {
        std::fs::write(&bad, content).unwrap();
        let (code, _, stderr) = invoke(&["--replay", bad.to_str().unwrap()]);
        assert_eq!(code, 2, "{stderr}");
        assert!(
            stderr.contains(says) && stderr.contains("waft task journal ID --json"),
            "{stderr}"
        );
    }
    let (code, _, stderr) = invoke(&["--replay", "/nonexistent/journal.json"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("cannot read"), "{stderr}");
}
