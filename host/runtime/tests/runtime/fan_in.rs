//! Fan-in: a lambda waiting for children that have not all ended is
//! suspended (holding no instance) and, resumed once they have, gets each
//! one's end in the order it asked; resumed too early, it is suspended
//! again with its journal unchanged; what the wait returned is replayed,
//! not asked again.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use waft_core::TaskStatus;
use waft_core::model::{ChildEnd, JournalEntry, Wait};
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

async fn chain() -> PreparedLambda {
    let runtime = Runtime::new(waft_runtime::RuntimeConfig::default()).unwrap();
    support::prepare(&runtime, samples::CHAIN).await
}

async fn execute(
    lambda: &PreparedLambda,
    plan: &Value,
    journal: &mut Vec<JournalEntry>,
    host: &Arc<RecordingHost>,
) -> Execution {
    let input = support::task("01FANIN", "chain", plan);
    support::run_journaled_on(lambda, input, &suspending(), journal, host.clone()).await
}

fn end(id: &str, status: TaskStatus, output: Option<&str>, error: Option<&str>) -> ChildEnd {
    ChildEnd {
        id: id.into(),
        status,
        output: output.map(|o| o.as_bytes().to_vec()),
        error: error.map(str::to_owned),
    }
}

#[tokio::test]
async fn a_fan_in_suspends_until_every_child_has_ended_and_gets_their_ends_in_order() {
    let lambda = chain().await;
    let plan = json!({"lambda": "hello", "names": ["a", "b", "c"], "wait": true});
    let host = Arc::new(RecordingHost::default());
    let mut journal = Vec::new();
    let ids = ["local-child-1", "local-child-2", "local-child-3"].map(String::from);

    let first = execute(&lambda, &plan, &mut journal, &host).await;
    let expected = Outcome::Suspended {
        until: match &first.outcome {
            Outcome::Suspended { until, .. } => *until,
            other => panic!("expected a suspension, got {other:?}"),
        },
        wait: Wait::Children { ids: ids.to_vec() },
    };
    assert_eq!(first.outcome, expected);
    assert_eq!(host.children_requested(), 3);
    assert_eq!(journal.len(), 3, "the children, and nothing for the wait");

    // Two ended: resumed, it replays its children (scheduling none again)
    // and is suspended again, its journal unchanged.
    host.end_child(end(&ids[1], TaskStatus::Success, Some("{}"), None));
    host.end_child(end(&ids[0], TaskStatus::Success, Some("\"a\""), None));
    let written = journal.clone();
    let again = execute(&lambda, &plan, &mut journal, &host).await;
    assert!(
        matches!(
            &again.outcome,
            Outcome::Suspended {
                wait: Wait::Children { .. },
                ..
            }
        ),
        "{:?}",
        again.outcome
    );
    assert_eq!(journal, written);
    assert_eq!(host.children_requested(), 3);

    host.end_child(end(
        &ids[2],
        TaskStatus::FatalFailure,
        None,
        Some("no such user"),
    ));
    let resumed = execute(&lambda, &plan, &mut journal, &host).await;
    let answer = output(&resumed);
    assert_eq!(
        answer["ends"],
        json!([
            {"id": ids[0], "status": "Success", "output": "\"a\"", "error": null},
            {"id": ids[1], "status": "Success", "output": "{}", "error": null},
            {"id": ids[2], "status": "FatalFailure", "output": null, "error": "no such user"},
        ])
    );
    let wait = journal.last().expect("the wait's answer is journaled");
    assert_eq!(wait.call, "waft:lambda/children.wait-all");
    assert_eq!(wait.summary, "wait for 3 children → 1 not succeeded");

    // A replay answers from the journal: a platform that forgot the
    // children changes nothing.
    let forgetful = Arc::new(RecordingHost::default());
    let replayed = execute(&lambda, &plan, &mut journal, &forgetful).await;
    assert_eq!(output(&replayed), answer);
}

#[tokio::test]
async fn children_that_end_quickly_are_gathered_in_the_instance() {
    let lambda = chain().await;
    let plan = json!({"lambda": "hello", "names": ["a"], "wait": true});
    let host = Arc::new(RecordingHost::default());
    let ender = host.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        ender.end_child(end(
            "local-child-1",
            TaskStatus::Dead,
            None,
            Some("timed out"),
        ));
    });
    let mut journal = Vec::new();
    let execution = execute(&lambda, &plan, &mut journal, &host).await;
    assert_eq!(output(&execution)["ends"][0]["status"], "Dead");
}

#[tokio::test]
async fn a_wait_for_no_children_returns_at_once() {
    let lambda = chain().await;
    let plan = json!({"wait": true});
    let host = Arc::new(RecordingHost::default());
    let mut journal = Vec::new();
    let execution = execute(&lambda, &plan, &mut journal, &host).await;
    assert_eq!(output(&execution)["ends"], json!([]));
}

#[tokio::test]
async fn a_replay_only_run_stops_at_a_wait_its_journal_does_not_answer() {
    let lambda = chain().await;
    let plan = json!({"lambda": "hello", "names": ["a"], "wait": true});
    let host = Arc::new(RecordingHost::default());
    let mut journal = Vec::new();
    let first = execute(&lambda, &plan, &mut journal, &host).await;
    assert!(
        matches!(first.outcome, Outcome::Suspended { .. }),
        "{:?}",
        first.outcome
    );
    // A laptop's replay of that journal: nothing asked, stopped at the wait.
    let sandbox = Sandbox {
        replay_only: true,
        ..suspending()
    };
    let input = support::task("01FANIN", "chain", &plan);
    let forgetful = Arc::new(RecordingHost::default());
    let mut copy = journal.clone();
    let replayed = support::run_journaled_on(&lambda, input, &sandbox, &mut copy, forgetful).await;
    assert_eq!(
        replayed.journal_end,
        Some((1, "waft:lambda/children.wait-all".to_owned())),
        "{:?}",
        replayed.outcome
    );
}
