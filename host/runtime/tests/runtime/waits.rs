//! Durable waits: a lambda blocked on nothing but a long enough timer is
//! suspended — the execution ends with the wait's end in its journal — and
//! the next execution replays up to the wait and goes on from it, whether
//! the lambda slept with `waft_sdk::sleep` or `std::thread::sleep`. Short
//! waits, and waits with no store to resume from, are waited out in place.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};
use waft_core::model::JournalEntry;
use waft_runtime::{
    Execution, Outcome, PreparedLambda, Runtime, RuntimeConfig, Sandbox, TaskInput,
};
use waft_sample_artifacts as samples;
use waft_testing::http::{HttpServer, Reply};

use crate::support;
use crate::support::output;

const SUSPEND_AFTER: Duration = Duration::from_millis(300);

fn suspending(origin: Option<&str>) -> Sandbox {
    let grants = waft_core::Grants {
        outbound: origin.iter().map(|o| o.parse().unwrap()).collect(),
        ..waft_core::Grants::default()
    };
    Sandbox {
        grants: Arc::new(grants),
        suspend_after: Some(SUSPEND_AFTER),
        ..Sandbox::default()
    }
}

/// Runs `plan` from `journal` (attempt 1 throughout: a suspension spends no
/// attempt), and brings the journal to what the execution left.
async fn execute(
    lambda: &PreparedLambda,
    sandbox: &Sandbox,
    plan: &Value,
    journal: &mut Vec<JournalEntry>,
) -> Execution {
    let input: TaskInput = support::task("01WAITS", "durable", plan);
    support::run_journaled(lambda, input, sandbox, journal).await
}

fn suspended_until(execution: &Execution) -> SystemTime {
    match execution.outcome {
        Outcome::Suspended { until, .. } => until,
        ref other => panic!("expected a suspension, got {other:?}"),
    }
}

async fn sleep_until(at: SystemTime) {
    if let Ok(left) = at.duration_since(SystemTime::now()) {
        tokio::time::sleep(left + Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn a_long_sleep_suspends_and_the_next_execution_goes_on_after_it() {
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let lambda = support::prepare(&runtime, samples::DURABLE).await;
    let plan = json!({"sleep_ms": 1500});
    let mut journal = Vec::new();

    let asked = SystemTime::now();
    let first = execute(&lambda, &suspending(None), &plan, &mut journal).await;
    let until = suspended_until(&first);
    assert!(
        first.duration < Duration::from_millis(1000),
        "{:?}",
        first.duration
    );
    let slept = until.duration_since(asked).unwrap();
    assert!(
        slept >= Duration::from_millis(1500) && slept < Duration::from_millis(2500),
        "{slept:?}"
    );
    let last = journal.last().expect("the wait is journaled");
    assert!(last.call.ends_with("subscribe-duration"), "{}", last.call);
    assert!(
        last.summary.starts_with("wait 1.5s, until "),
        "{}",
        last.summary
    );

    // Woken before its time (clocks differ between hosts): suspended again
    // until the same time, the journal unchanged.
    let written = journal.clone();
    let early = execute(&lambda, &suspending(None), &plan, &mut journal).await;
    assert_eq!(suspended_until(&early), until);
    assert_eq!(journal, written);

    // After it, the lambda goes on from its sleep: everything before is
    // replayed, and the time it read after the sleep is past the sleep.
    sleep_until(until).await;
    let resumed = execute(&lambda, &suspending(None), &plan, &mut journal).await;
    let answer = output(&resumed);
    assert!(resumed.replayed > 0);
    let elapsed: u128 = answer["elapsed"].as_str().unwrap().parse().unwrap();
    assert!(elapsed >= 1_500_000_000, "elapsed {elapsed}ns");
    // And a replay of the whole journal answers the same.
    let again = execute(&lambda, &suspending(None), &plan, &mut journal).await;
    assert_eq!(output(&again), answer);
}

#[tokio::test]
async fn std_thread_sleep_suspends_between_outside_calls_and_none_is_made_twice() {
    let server = HttpServer::start(|_| Reply::status(200, "ok")).await;
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let lambda = support::prepare(&runtime, samples::DURABLE).await;
    let sandbox = suspending(Some(&server.url()));
    let plan = json!({"url": format!("{}/", server.url()), "posts": 3, "step_ms": 1000});
    let mut journal = Vec::new();

    let mut suspensions = 0;
    let answer = loop {
        let execution = execute(&lambda, &sandbox, &plan, &mut journal).await;
        match execution.outcome {
            Outcome::Suspended { until, .. } => {
                suspensions += 1;
                assert_eq!(server.requests().len(), suspensions, "one POST a wake");
                sleep_until(until).await;
            }
            _ => break output(&execution),
        }
        assert!(suspensions <= 2, "suspended more often than it slept");
    };
    assert_eq!(suspensions, 2);
    assert_eq!(server.requests().len(), 3, "each POST once");
    assert_eq!(answer["answers"], json!(["ok", "ok", "ok"]));
}

#[tokio::test]
async fn short_waits_and_waits_with_nowhere_to_resume_stay_in_the_instance() {
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let lambda = support::prepare(&runtime, samples::DURABLE).await;

    let started = Instant::now();
    let short = execute(
        &lambda,
        &suspending(None),
        &json!({"sleep_ms": 200}),
        &mut Vec::new(),
    )
    .await;
    assert!(
        matches!(short.outcome, Outcome::Success { .. }),
        "{:?}",
        short.outcome
    );
    assert!(started.elapsed() >= Duration::from_millis(200));

    let started = Instant::now();
    let in_place = Sandbox::default();
    let long = execute(
        &lambda,
        &in_place,
        &json!({"sleep_ms": 700}),
        &mut Vec::new(),
    )
    .await;
    assert!(
        matches!(long.outcome, Outcome::Success { .. }),
        "{:?}",
        long.outcome
    );
    assert!(started.elapsed() >= Duration::from_millis(700));
}
