//! The sandbox's limits, each once within and once over — fuel, deadline,
//! memory, output, log — and its walls: `escape` reaches nothing, even with
//! an HTTP grant. Apart from the other samples because each check here runs
//! a misbehaving sample against a limit set for it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use waft_core::{ByteSize, Limits};
use waft_runtime::{KillSwitch, Limit, Outcome, RecordingHost, Sandbox};
use waft_sample_artifacts as samples;

use super::{output_json, run, runtime, task};

use crate::support::prepare;

#[tokio::test]
async fn fuel_within_and_over() {
    let limits = Limits {
        fuel: Some(50_000_000),
        ..Limits::default()
    };
    let within = run(samples::RUNAWAY, json!({"iterations": 1000}), limits).await;
    assert!(within.outcome.kind() == "success", "{:?}", within.outcome);
    assert!(within.fuel_consumed.unwrap() < 50_000_000);

    let over = run(samples::RUNAWAY, Value::Null, limits).await;
    assert!(
        matches!(
            over.outcome,
            Outcome::LimitExceeded {
                limit: Limit::Fuel,
                ..
            }
        ),
        "{:?}",
        over.outcome
    );
}

#[tokio::test]
async fn deadline_within_and_over() {
    let limits = Limits {
        timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let within = run(samples::SLEEPY, json!({"steps": 2, "step_ms": 10}), limits).await;
    assert_eq!(within.outcome.kind(), "success", "{:?}", within.outcome);

    let started = Instant::now();
    let over = run(samples::RUNAWAY, Value::Null, limits).await;
    assert!(
        matches!(
            over.outcome,
            Outcome::LimitExceeded {
                limit: Limit::Deadline,
                ..
            }
        ),
        "{:?}",
        over.outcome
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "stopped after {:?}",
        started.elapsed()
    );

    // A guest waiting in a host call (a sleep) is stopped too.
    let asleep = run(
        samples::SLEEPY,
        json!({"steps": 1, "step_ms": 60_000}),
        limits,
    )
    .await;
    assert!(
        matches!(
            asleep.outcome,
            Outcome::LimitExceeded {
                limit: Limit::Deadline,
                ..
            }
        ),
        "{:?}",
        asleep.outcome
    );
}

#[tokio::test]
async fn memory_within_and_over() {
    let limits = Limits {
        max_memory: ByteSize::mib(32),
        ..Limits::default()
    };
    let within = run(samples::HOG, json!({"mib": 8}), limits).await;
    assert_eq!(output_json(&within), json!({"allocated_mib": 8}));
    assert!(within.peak_memory >= 8 << 20);

    let over = run(samples::HOG, Value::Null, limits).await;
    assert!(
        matches!(
            over.outcome,
            Outcome::LimitExceeded {
                limit: Limit::Memory,
                ..
            }
        ),
        "{:?}",
        over.outcome
    );
    assert!(over.peak_memory <= 32 << 20);
}

#[tokio::test]
async fn output_within_and_over() {
    let name = "x".repeat(100);
    let limits = Limits {
        max_output: ByteSize::b(64),
        ..Limits::default()
    };
    let over = run(samples::HELLO, json!({"name": name}), limits).await;
    assert!(
        matches!(
            over.outcome,
            Outcome::LimitExceeded {
                limit: Limit::Output,
                ..
            }
        ),
        "{:?}",
        over.outcome
    );
    let within = run(samples::HELLO, json!({"name": "Ada"}), limits).await;
    assert_eq!(within.outcome.kind(), "success");
}

#[tokio::test]
async fn log_within_and_over_its_budget() {
    let payload = json!({"steps": 20, "step_ms": 0});
    let within = run(samples::SLEEPY, payload.clone(), Limits::default()).await;
    assert_eq!(within.log.records.len(), 20);
    assert!(!within.log.truncated());

    // Room for some of the 20 records, each charged its text and its
    // fixed cost, not for all of them.
    let budget = 2048;
    let limits = Limits {
        max_log: ByteSize::b(budget),
        ..Limits::default()
    };
    let over = run(samples::SLEEPY, payload, limits).await;
    assert_eq!(
        over.outcome.kind(),
        "success",
        "logging too much is not a failure"
    );
    assert!(over.log.truncated());
    assert!(!over.log.records.is_empty(), "some records fit the budget");
    assert_eq!(over.log.records.len() as u64 + over.log.dropped_records, 20);
    let kept: u64 = over.log.records.iter().map(|r| r.cost()).sum();
    assert!(kept <= budget, "records costing {kept} bytes kept");
}

#[tokio::test]
async fn escape_gets_nothing() {
    let execution = run(samples::ESCAPE, Value::Null, Limits::default()).await;
    let output = output_json(&execution);
    assert_eq!(output["escaped"], json!([]), "{output}");
    assert_eq!(output["denied"].as_array().unwrap().len(), 10, "{output}");
}

#[tokio::test]
async fn escape_granted_http_still_gets_no_socket() {
    // An HTTP grant is for wasi:http alone: raw sockets and name lookups
    // stay closed, even towards the granted destination.
    let runtime = runtime();
    let lambda = prepare(&runtime, samples::ESCAPE).await;
    let sandbox = Sandbox {
        grants: Arc::new(waft_core::Grants {
            outbound: vec![
                "http://127.0.0.1:*".parse().unwrap(),
                "http://localhost:*".parse().unwrap(),
            ],
            ..waft_core::Grants::default()
        }),
        ..Sandbox::default()
    };
    let execution = lambda
        .run(
            task("escape", Value::Null),
            &sandbox,
            Arc::new(RecordingHost::default()),
            &KillSwitch::new(),
        )
        .await;
    let output = output_json(&execution);
    assert_eq!(output["escaped"], json!([]), "{output}");
}
