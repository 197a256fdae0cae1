//! What each well-behaved sample answers in the real runtime, one outcome
//! at a time: success with its JSON, a retriable failure until its attempt,
//! a fatal failure, and a panic, which is a trap with its message in the
//! log. Apart from the host calls and the limits because these samples need
//! nothing of the host but a task and the default sandbox.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use waft_core::Limits;
use waft_runtime::{LogSource, Outcome, RecordingHost};
use waft_sample_artifacts as samples;

use super::{messages, output_json, run, run_with, task};

#[tokio::test]
async fn hello_answers_json_and_logs() {
    let execution = run(samples::HELLO, json!({"name": "Ada"}), Limits::default()).await;
    assert_eq!(output_json(&execution), json!({"greeting": "Hello, Ada!"}));
    assert_eq!(messages(&execution), ["info greeted on attempt 1"]);
}

#[tokio::test]
async fn hello_rejects_a_payload_that_is_not_its_json_as_fatal() {
    let execution = run(samples::HELLO, json!([1, 2]), Limits::default()).await;
    assert!(
        matches!(&execution.outcome, Outcome::Fatal { message } if message.contains("payload is not the expected JSON")),
        "{:?}",
        execution.outcome
    );
}

#[tokio::test]
async fn word_stats_uses_real_crates() {
    let text = "The cat and the hat. Mail ada@example.com or see https://example.org/x, the end.";
    let execution = run(
        samples::WORD_STATS,
        json!({"text": text, "top": 1}),
        Limits::default(),
    )
    .await;
    let output = output_json(&execution);
    assert_eq!(output["top"], json!([["the", 3]]));
    assert_eq!(output["emails"], json!(["ada@example.com"]));
    assert_eq!(output["urls"], json!(["https://example.org/x"]));
}

#[tokio::test]
async fn flaky_retries_until_its_attempt() {
    let payload = json!({"succeed_on": 3, "retry_after_ms": 25});
    let first = run(samples::FLAKY, payload.clone(), Limits::default()).await;
    assert_eq!(
        first.outcome,
        Outcome::Retriable {
            message: "attempt 1 of 3: not yet".into(),
            retry_after: Some(Duration::from_millis(25)),
        }
    );
    let mut third = task("flaky", payload);
    third.attempt = 3;
    let done = run_with(
        samples::FLAKY,
        third,
        Limits::default(),
        Arc::new(RecordingHost::default()),
    )
    .await;
    assert_eq!(output_json(&done), json!({"succeeded_on": 3}));
}

#[tokio::test]
async fn fatal_fails_for_good() {
    let execution = run(samples::FATAL, json!({"account": 7}), Limits::default()).await;
    assert!(
        matches!(&execution.outcome, Outcome::Fatal { message } if message.contains("no such account")),
        "{:?}",
        execution.outcome
    );
    assert_eq!(
        execution.log.records[0].source,
        LogSource::Lambda(waft_runtime::Level::Warn)
    );
}

#[tokio::test]
async fn a_panic_is_a_trap_with_its_message_in_the_log() {
    let execution = run(samples::PANIC, Value::Null, Limits::default()).await;
    assert!(
        matches!(execution.outcome, Outcome::Trapped { .. }),
        "{:?}",
        execution.outcome
    );
    let stderr: Vec<&str> = execution
        .log
        .records
        .iter()
        .filter(|r| r.source == LogSource::Stderr)
        .map(|r| r.message.as_str())
        .collect();
    assert!(
        stderr
            .iter()
            .any(|line| line.contains("index out of bounds")),
        "{stderr:?}"
    );
}
