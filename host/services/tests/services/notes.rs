//! A heartbeat's progress note is a few words for people, not a data
//! channel: whatever a lambda passes, the host keeps a short note without
//! the lambda's secrets, and the HSC stores no longer one, from whichever
//! executor it comes. A note is stored in `tasks.progress` and read back by
//! anyone who may read the task, so a secret in it must never be kept in
//! clear.

use std::sync::Arc;
use std::time::UNIX_EPOCH;

use waft_core::model::Heartbeat;
use waft_core::{LambdaConfig, Limits};
use waft_runtime::{KillSwitch, Outcome, RecordingHost, Sandbox, TaskInput};
use waft_services::{Clock, HeartbeatConfig, Hsc, HscApi, SystemClock};
use waft_store::{NewTask, TaskInsertMany};

use crate::support;

/// What the lambda's secret is set to; never to be read back in clear.
const SECRET: &str = "s3cr3t-notes-do-not-leak";
/// A note far over any sensible size: 17 MiB.
const HUGE: usize = 17 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_note_reaches_the_host_short_and_without_its_secret() {
    let runtime = support::on_demand_runtime();
    let greedy = std::fs::read(waft_sample_artifacts::GREEDY).unwrap();
    let lambda = runtime.prepare(&greedy).await.unwrap();
    let sandbox = Sandbox {
        limits: Limits::default(),
        secrets: Arc::new(vec![("secret".into(), SECRET.into())]),
        ..Sandbox::default()
    };
    let host = Arc::new(RecordingHost::default());
    let task = TaskInput {
        id: "01M81141G398N4ZV4VMQVXT2M3".into(),
        lambda: "noter".into(),
        collection: String::new(),
        priority: 0,
        attempt: 1,
        scheduled_at: UNIX_EPOCH,
        payload: serde_json::json!({ "attack": "note", "bytes": HUGE })
            .to_string()
            .into_bytes(),
        journal: Vec::new(),
    };
    let execution = lambda
        .run(task, &sandbox, host.clone(), &KillSwitch::new())
        .await;
    assert!(
        matches!(execution.outcome, Outcome::Success { .. }),
        "{:?}",
        execution.outcome
    );
    let note = host.last_progress().expect("the lambda sent a note");
    assert!(note.len() <= 4 << 10, "a note of {} bytes", note.len());
    assert!(!note.contains(SECRET), "the secret reached the host");
    assert!(note.starts_with("[redacted]"), "{note:.100}");
    assert!(
        note.ends_with(" bytes in all]"),
        "{}",
        &note[note.len() - 40..]
    );
}

#[tokio::test]
async fn the_hsc_stores_no_huge_note() {
    let dir = tempfile::TempDir::new().unwrap();
    let store = support::sqlite_store(&dir).await;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    support::store_lambda(&*store, "noter", LambdaConfig::default()).await;
    store
        .task_insert_many(TaskInsertMany {
            tasks: vec![NewTask {
                lambda: "noter".into(),
                ..NewTask::default()
            }],
            now: clock.now(),
        })
        .await
        .unwrap();
    let claims = support::enqueue_ready(&*store, 1).await.unwrap();
    let hsc = Hsc::new(store.clone(), clock, HeartbeatConfig::default());
    let claimed = hsc
        .task_claim_many(claims)
        .await
        .unwrap()
        .remove(0)
        .unwrap();
    // A note from an executor that does not cut its lambdas' notes.
    let answers = hsc
        .task_heartbeat_many(vec![Heartbeat {
            id: claimed.id.clone(),
            lease_token: claimed.lease_token,
            progress: Some("é".repeat(HUGE / 2)),
        }])
        .await
        .unwrap();
    assert_eq!(answers, vec![Ok(())]);
    let progress = store
        .task_get(&claimed.id)
        .await
        .unwrap()
        .unwrap()
        .progress
        .unwrap_or_default();
    assert!(
        (1..=4 << 10).contains(&progress.len()),
        "a note of {} bytes kept",
        progress.len()
    );
    assert!(progress.starts_with('é'), "{progress:.40}");
}
