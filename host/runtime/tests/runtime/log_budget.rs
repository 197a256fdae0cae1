//! A lambda that logs as fast as it can, in the real runtime: empty records
//! and bare newlines cost their fixed share of the budget, so what is kept
//! stays within `max_log`, the rest is only counted, and splitting stdout
//! into lines keeps up with the lambda.

use serde_json::{Value, json};
use waft_core::{ByteSize, Limits};
use waft_runtime::{Execution, Outcome, Runtime, RuntimeConfig, TaskLog};
use waft_sample_artifacts as samples;

use crate::support;

/// The budget every run here gets.
const MAX_LOG: u64 = 1024;

async fn greedy(payload: Value) -> Execution {
    let runtime = Runtime::new(RuntimeConfig::default()).expect("runtime");
    let lambda = support::prepare(&runtime, samples::GREEDY).await;
    let input = support::task("01TEST", "greedy", &payload);
    let limits = Limits {
        max_log: ByteSize::b(MAX_LOG),
        ..Limits::default()
    };
    support::run(&lambda, input, limits).await
}

/// How far the attack got, from the lambda's `{"done": N}`.
fn done(execution: &Execution) -> u64 {
    let Outcome::Success {
        output: Some(bytes),
    } = &execution.outcome
    else {
        panic!(
            "logging too much is not a failure, got {:?}",
            execution.outcome
        );
    };
    let output: Value = serde_json::from_slice(bytes).expect("JSON output");
    output["done"].as_u64().expect("a count")
}

/// What the kept records cost, and the log rendered, are within the budget
/// (the rendering plus its one line about what was dropped).
fn assert_within_budget(log: &TaskLog) {
    let held: u64 = log.records.iter().map(|r| r.cost()).sum();
    assert!(
        held <= MAX_LOG,
        "{} records cost {held} bytes",
        log.records.len()
    );
    let rendered = log.render().map_or(0, |text| text.len() as u64);
    assert!(
        rendered <= MAX_LOG + TaskLog::MAX_TRAILER,
        "{} records render as {rendered} bytes",
        log.records.len()
    );
}

#[tokio::test]
async fn empty_records_cannot_outgrow_the_budget() {
    let execution = greedy(json!({"attack": "empty-logs", "for_ms": 3000})).await;
    let sent = done(&execution);
    let log = &execution.log;
    assert_within_budget(log);
    assert!(log.truncated());
    assert_eq!(log.records.len() as u64 + log.dropped_records, sent);
}

#[tokio::test]
async fn bare_newlines_are_split_as_fast_as_they_are_written() {
    let execution = greedy(json!({"attack": "newlines", "for_ms": 3000})).await;
    let writes = done(&execution);
    let log = &execution.log;
    assert_within_budget(log);
    assert!(log.truncated());
    assert_eq!(
        log.records.len() as u64 + log.dropped_records,
        writes * 64 * 1024,
        "one record per newline"
    );
    // 64 KiB of newlines is 65,536 records; a host that splits them in
    // linear time keeps up with far more than 300 writes in 3 s, even in a
    // debug build on a busy machine.
    assert!(writes >= 300, "only {writes} writes of 64 KiB in 3 s");
}
