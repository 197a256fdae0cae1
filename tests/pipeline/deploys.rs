//! Every deploy is seen at once: lambdas deployed one after another, each
//! with a task scheduled right after its deploy, each start within moments,
//! in either mode. The executors' and the Controller's refreshes and the
//! executor's `NextWork` wait are far longer than the test, so only the
//! word of each deploy can start its task in time.

use std::time::{Duration, Instant};

use serde_json::json;
use waft_core::TaskStatus;
use waft_sample_artifacts as samples;

use crate::support::{Cluster, Layout};

/// Lambdas deployed one after another.
const LAMBDAS: usize = 8;
/// Timers no task of the test may wait for.
const LONG: &[(&str, &str)] = &[
    ("WAFT_EXECUTOR_REFRESH", "1h"),
    ("WAFT_CONTROLLER_REFRESH", "1h"),
    ("WAFT_EXECUTOR_NEXT_WORK_WAIT", "25s"),
    ("WAFT_CONTROLLER_SWEEP", "1h"),
    ("WAFT_CONSUMER_ENQUEUE_TIMEOUT", "120s"),
];
/// A task of a lambda just deployed ends within this (a loaded machine
/// and a debug build included); a task that waits for a timer takes
/// seconds more.
const PROMPT: Duration = Duration::from_secs(3);

/// In `waft dev`.
pub async fn every_deploy_is_seen_at_once_in_dev() {
    let extra = LONG
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let cluster = Cluster::dev_on_with(None, |_| {}, extra).await;
    deploy_one_after_another(&cluster).await;
}

/// Across processes; `false` when this machine cannot run them.
pub async fn every_deploy_is_seen_at_once_across_processes() -> bool {
    let Some(cluster) = Cluster::distributed_with(Layout {
        executors: 1,
        hsc_link: false,
        sqs_link: false,
        env: LONG,
    })
    .await
    else {
        return false;
    };
    deploy_one_after_another(&cluster).await;
    true
}

/// Deploys `deployed-1`… one after another, scheduling one task after
/// each deploy, and asserts each ended within [`PROMPT`].
async fn deploy_one_after_another(cluster: &Cluster) {
    let mut slow = Vec::new();
    for n in 1..=LAMBDAS {
        let name = format!("deployed-{n}");
        cluster.deploy(&name, samples::HELLO, |_| {}).await;
        let scheduled = Instant::now();
        let id = cluster.schedule(&name, json!({"name": "Ada"}), None).await;
        let task = cluster.finished(&id, Duration::from_secs(60)).await;
        let took = scheduled.elapsed();
        assert_eq!(task.status, TaskStatus::Success, "{task:#?}");
        eprintln!("{name}: scheduled to ended in {took:?}");
        if took > PROMPT {
            slow.push(format!("{name} took {took:?}"));
        }
    }
    assert!(
        slow.is_empty(),
        "tasks of lambdas just deployed waited for a timer: {}",
        slow.join(", ")
    );
}
