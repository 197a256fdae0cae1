//! Waits for signals: a lambda waiting for a signal that has not come is
//! suspended, the wait's timeout in its journal, and takes the signal when
//! a later execution finds it; signals sent before the wait are taken in
//! the order they came, one a wait; what a wait returned is replayed, not
//! asked again; with nowhere to resume, the wait stays in the instance and
//! still sees a signal sent meanwhile.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};
use waft_core::model::{JournalEntry, Wait};
use waft_runtime::{Execution, Outcome, PreparedLambda, RecordingHost, Runtime, Sandbox};
use waft_sample_artifacts as samples;

use crate::support;
use crate::support::output;

fn suspending() -> Sandbox {
    Sandbox {
        suspend_after: Some(Duration::from_millis(300)),
        ..Sandbox::default()
    }
}

async fn durable() -> PreparedLambda {
    let runtime = Runtime::new(waft_runtime::RuntimeConfig::default()).unwrap();
    support::prepare(&runtime, samples::DURABLE).await
}

async fn execute(
    lambda: &PreparedLambda,
    sandbox: &Sandbox,
    plan: &Value,
    journal: &mut Vec<JournalEntry>,
    host: &Arc<RecordingHost>,
) -> Execution {
    let input = support::task("01SIGNALS", "durable", plan);
    support::run_journaled_on(lambda, input, sandbox, journal, host.clone()).await
}

/// The journal's last answer of a wait.
fn last_take(journal: &[JournalEntry]) -> &JournalEntry {
    journal
        .iter()
        .rev()
        .find(|entry| entry.call == "waft:lambda/signals.take")
        .expect("a wait's answer is journaled")
}

#[tokio::test]
async fn a_wait_for_a_signal_not_sent_suspends_until_it_is_and_takes_it() {
    let lambda = durable().await;
    let plan = json!({"signals": ["approved"], "signal_ms": 60_000});
    let host = Arc::new(RecordingHost::default());
    let mut journal = Vec::new();

    let asked = SystemTime::now();
    let first = execute(&lambda, &suspending(), &plan, &mut journal, &host).await;
    let Outcome::Suspended { until, wait } = &first.outcome else {
        panic!("expected a suspension, got {:?}", first.outcome);
    };
    let expected = Wait::Signal {
        name: "approved".into(),
        taken: 0,
    };
    assert_eq!(wait, &expected);
    let timeout = until.duration_since(asked).unwrap();
    assert!(
        timeout >= Duration::from_secs(60) && timeout < Duration::from_secs(61),
        "{timeout:?}"
    );
    let last = journal.last().expect("the wait is journaled");
    assert_eq!(last.call, "waft:lambda/signals.wait");
    assert!(
        last.summary
            .starts_with("wait for signal \"approved\" until "),
        "{}",
        last.summary
    );

    // Resumed with no signal yet (another signal's name, say): suspended
    // again until the same time, the journal unchanged.
    host.send_signal("rejected", "no");
    let written = journal.clone();
    let again = execute(&lambda, &suspending(), &plan, &mut journal, &host).await;
    assert_eq!(
        again.outcome,
        Outcome::Suspended {
            until: *until,
            wait: expected
        }
    );
    assert_eq!(journal, written);

    host.send_signal("approved", "yes");
    let resumed = execute(&lambda, &suspending(), &plan, &mut journal, &host).await;
    let answer = output(&resumed);
    assert_eq!(answer["signals"], json!(["yes"]));
    let take = last_take(&journal);
    assert_eq!(take.summary, "signal \"approved\" → 3 bytes");

    // A replay answers the wait from the journal: a platform that has lost
    // the signal changes nothing.
    let forgetful = Arc::new(RecordingHost::default());
    let replayed = execute(&lambda, &suspending(), &plan, &mut journal, &forgetful).await;
    assert_eq!(output(&replayed), answer);
}

#[tokio::test]
async fn signals_sent_before_their_waits_are_taken_in_order_one_a_wait() {
    let lambda = durable().await;
    let plan = json!({"signals": ["go", "go", "other"], "signal_ms": 150});
    let host = Arc::new(RecordingHost::default());
    host.send_signal("go", "first");
    host.send_signal("other", "x");
    host.send_signal("go", "second");
    let mut journal = Vec::new();
    let execution = execute(&lambda, &suspending(), &plan, &mut journal, &host).await;
    assert_eq!(
        output(&execution)["signals"],
        json!(["first", "second", "x"])
    );

    // A third wait for "go" finds none: a short wait times out in place.
    let plan = json!({"signals": ["go", "go", "go"], "signal_ms": 150});
    let mut journal = Vec::new();
    let started = Instant::now();
    let execution = execute(&lambda, &suspending(), &plan, &mut journal, &host).await;
    assert_eq!(
        output(&execution)["signals"],
        json!(["first", "second", null])
    );
    assert!(started.elapsed() >= Duration::from_millis(150));
    let last = last_take(&journal);
    assert!(
        last.summary.starts_with("signal \"go\" → none by "),
        "{}",
        last.summary
    );
}

#[tokio::test]
async fn with_nowhere_to_resume_a_wait_stays_in_the_instance_and_sees_a_signal_sent_meanwhile() {
    let lambda = durable().await;
    let plan = json!({"signals": ["approved"], "signal_ms": 30_000});
    let host = Arc::new(RecordingHost::default());
    let sender = host.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(400)).await;
        sender.send_signal("approved", "late");
    });
    let started = Instant::now();
    let mut journal = Vec::new();
    let execution = execute(&lambda, &Sandbox::default(), &plan, &mut journal, &host).await;
    assert_eq!(output(&execution)["signals"], json!(["late"]));
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn a_wait_without_end_is_a_century_and_a_bad_name_stops_the_lambda() {
    let lambda = durable().await;
    let host = Arc::new(RecordingHost::default());
    let plan = json!({"signals": ["approved"], "signal_ms": u64::MAX});
    let mut journal = Vec::new();
    let execution = execute(&lambda, &suspending(), &plan, &mut journal, &host).await;
    let Outcome::Suspended { until, .. } = execution.outcome else {
        panic!("expected a suspension, got {:?}", execution.outcome);
    };
    let years = until.duration_since(SystemTime::now()).unwrap().as_secs() / (365 * 24 * 3600);
    assert!((99..=101).contains(&years), "{years} years");

    let plan = json!({"signals": [""], "signal_ms": 10});
    let mut journal = Vec::new();
    let execution = execute(&lambda, &suspending(), &plan, &mut journal, &host).await;
    match &execution.outcome {
        Outcome::Trapped { message } => {
            assert!(message.contains("a signal needs a name"), "{message}");
        }
        other => panic!("expected the lambda stopped, got {other:?}"),
    }
}
