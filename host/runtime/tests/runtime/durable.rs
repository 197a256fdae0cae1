//! Durable executions: a later attempt is answered from its task's journal
//! — the clocks, randomness, configuration, outbound HTTP against a real
//! server on loopback, children, heartbeats — and takes the same path;
//! a changed lambda diverges; the engine computes floats the same way.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use waft_core::model::{ChildrenState, JournalEntry, JournalWrite};
use waft_core::{Grants, Limits, OnDivergence};
use waft_runtime::{
    ChildRequest, Execution, KillSwitch, LeaseLost, Outcome, PreparedLambda, Runtime,
    RuntimeConfig, Sandbox, ScheduleRejection, TaskHost, TaskInput, Unread,
};
use waft_sample_artifacts as samples;
use waft_testing::http::{HttpServer, Reply};

use crate::support;
use crate::support::output;

fn runtime() -> Runtime {
    Runtime::new(RuntimeConfig::default()).expect("runtime")
}

fn sandbox(origin: Option<&str>) -> Sandbox {
    let mut grants = Grants {
        outbound: origin.iter().map(|o| o.parse().unwrap()).collect(),
        ..Grants::default()
    };
    grants.env.insert("REGION".into(), "eu-west-1".into());
    Sandbox {
        grants: Arc::new(grants),
        ..Sandbox::default()
    }
}

/// Runs attempt `attempt` of `plan` from `journal`, and brings the journal
/// to what the attempt left.
async fn attempt(
    lambda: &PreparedLambda,
    sandbox: &Sandbox,
    plan: &Value,
    attempt: u32,
    journal: &mut Vec<JournalEntry>,
) -> Execution {
    let mut input: TaskInput = support::task("01DURABLE", "durable", plan);
    input.attempt = attempt;
    support::run_journaled(lambda, input, sandbox, journal).await
}

fn calls(journal: &[JournalEntry]) -> Vec<&str> {
    journal.iter().map(|e| e.call.as_str()).collect()
}

#[tokio::test]
async fn a_retry_replays_every_call_and_takes_the_same_branch() {
    let runtime = runtime();
    let lambda = support::prepare(&runtime, samples::DURABLE).await;
    let sandbox = sandbox(None);
    let plan = json!({"children": 2});
    let mut journal = Vec::new();
    let first = attempt(&lambda, &sandbox, &plan, 1, &mut journal).await;
    let first = output(&first);
    for call in [
        "wasi:clocks/wall-clock.now",
        "wasi:clocks/monotonic-clock.now",
        "wasi:random/random.get-random-u64",
        "wasi:random/insecure-seed.insecure-seed",
        "wasi:config/store.get",
        "waft:lambda/children.schedule",
        "waft:lambda/heartbeat.beat",
    ] {
        assert!(
            calls(&journal).contains(&call),
            "{call} in {:?}",
            calls(&journal)
        );
    }
    assert!(journal.iter().all(|e| e.attempt == 1));
    let recorded = journal.clone();

    let second = attempt(&lambda, &sandbox, &plan, 2, &mut journal).await;
    assert_eq!(second.replayed as usize, recorded.len());
    assert_eq!(journal, recorded, "a full replay adds nothing");
    let mut second = output(&second);
    assert_eq!(second["attempt"], 2);
    second["attempt"] = first["attempt"].clone();
    // The clocks, the coin and its branch, the children's ids, the floats.
    assert_eq!(second, first);
}

/// A lambda that heartbeats a million times, each beat with its own note,
/// journals one entry for them all (they all answered "alive"), and its
/// retry replays every beat from it.
#[tokio::test]
async fn a_million_heartbeats_share_an_entry_and_replay() {
    let runtime = runtime();
    let lambda = support::prepare(&runtime, samples::DURABLE).await;
    let sandbox = Sandbox {
        limits: Limits {
            timeout: Duration::from_secs(600),
            ..Limits::default()
        },
        ..sandbox(None)
    };
    let plan = json!({"beats": 1_000_000});
    let mut journal = Vec::new();
    let first = attempt(&lambda, &sandbox, &plan, 1, &mut journal).await;
    let first = output(&first);
    let beats: Vec<_> = journal
        .iter()
        .filter(|e| e.call == "waft:lambda/heartbeat.beat")
        .collect();
    assert_eq!(beats.len(), 1, "{:?}", calls(&journal));
    assert!(
        beats[0].summary.ends_with("and 1000000 more like it"),
        "{}",
        beats[0].summary
    );
    let recorded = journal.clone();
    let second = attempt(&lambda, &sandbox, &plan, 2, &mut journal).await;
    assert_eq!(second.replayed as usize, recorded.len());
    assert_eq!(journal, recorded, "a full replay adds nothing");
    let mut second = output(&second);
    second["attempt"] = first["attempt"].clone();
    assert_eq!(second, first);
}

/// A lambda whose only host call is its log journals nothing: its result
/// carries no journal, and no durability point writes one.
#[tokio::test]
async fn a_lambda_that_makes_no_journaled_call_writes_nothing() {
    let runtime = runtime();
    let hello = support::prepare(&runtime, samples::HELLO).await;
    let mut journal = Vec::new();
    let execution = attempt(
        &hello,
        &sandbox(None),
        &json!({"name": "Ada"}),
        1,
        &mut journal,
    )
    .await;
    output(&execution);
    assert!(journal.is_empty(), "{:?}", calls(&journal));
    assert_eq!(execution.journal, JournalWrite::default());
}

/// A platform that answers children at once, as the executor's does, and
/// notes in one sequence what it was asked and what the server heard.
struct Ordered {
    events: Arc<Mutex<Vec<&'static str>>>,
}

#[async_trait::async_trait]
impl TaskHost for Ordered {
    async fn heartbeat(&self, _: Option<String>) -> Result<(), LeaseLost> {
        Ok(())
    }

    async fn schedule(&self, child: ChildRequest) -> Result<String, ScheduleRejection> {
        self.events.lock().unwrap().push("schedule");
        Ok(format!("child-{}", child.rank))
    }

    async fn settle(&self) -> Result<(), LeaseLost> {
        self.events.lock().unwrap().push("settle");
        Ok(())
    }

    async fn journal(&self, _: JournalWrite) -> Result<(), LeaseLost> {
        self.events.lock().unwrap().push("journal");
        Ok(())
    }

    async fn signal(&self, _: &str, _: u32) -> Result<Option<Vec<u8>>, Unread> {
        Ok(None)
    }

    async fn children(&self, _: &[String]) -> Result<ChildrenState, Unread> {
        Err(Unread::Unavailable("no children here".into()))
    }
}

/// A host may answer a child before writing it: it is asked to write what
/// it holds before a request of the execution leaves, so nobody outside
/// hears of an execution whose children do not exist yet.
#[tokio::test]
async fn the_host_settles_before_a_request_leaves() {
    let events = Arc::new(Mutex::new(Vec::new()));
    let heard = events.clone();
    let server = HttpServer::start(move |_| {
        heard.lock().unwrap().push("request");
        Reply::status(200, "ok")
    })
    .await;
    let runtime = runtime();
    let lambda = support::prepare(&runtime, samples::DURABLE).await;
    let plan = json!({"url": server.url(), "posts": 1, "children": 2, "children_first": true});
    let host = Arc::new(Ordered {
        events: events.clone(),
    });
    let execution = lambda
        .run(
            support::task("01DURABLE", "durable", &plan),
            &sandbox(Some(&server.url())),
            host,
            &KillSwitch::new(),
        )
        .await;
    output(&execution);
    let events = events.lock().unwrap().clone();
    let request = events.iter().position(|e| *e == "request").unwrap();
    assert_eq!(
        events[..request],
        ["schedule", "schedule", "settle"],
        "{events:?}"
    );
}

#[tokio::test]
async fn posts_made_before_a_crash_are_not_made_again() {
    let server =
        HttpServer::start(|request| Reply::status(200, &format!("got {}", request.body.len())))
            .await;
    let runtime = runtime();
    let lambda = support::prepare(&runtime, samples::DURABLE).await;
    let sandbox = sandbox(Some(&server.url()));
    let plan = json!({"url": server.url(), "posts": 4, "crash_after": 3});
    let mut journal = Vec::new();
    let first = attempt(&lambda, &sandbox, &plan, 1, &mut journal).await;
    assert!(
        matches!(&first.outcome, Outcome::Trapped { .. }),
        "{:?}",
        first.outcome
    );
    assert_eq!(server.requests().len(), 3);
    let second = attempt(&lambda, &sandbox, &plan, 2, &mut journal).await;
    let answer = output(&second);
    assert_eq!(answer["answers"].as_array().map(Vec::len), Some(4));
    let requests = server.requests();
    let mut seen: Vec<u64> = requests
        .iter()
        .map(|r| {
            serde_json::from_slice::<Value>(&r.body).unwrap()["n"]
                .as_u64()
                .unwrap()
        })
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, [0, 1, 2, 3], "each POST reached the server once");
    // The fourth carried the key of its rank, replayed requests counted.
    assert_eq!(
        requests[3].header("idempotency-key"),
        Some("waft-01DURABLE-3")
    );
    // Each answer was written before the lambda saw it.
    let outside: Vec<_> = journal.iter().filter(|e| e.outside).collect();
    assert_eq!(outside.len(), 4);
    assert!(outside.iter().all(|e| e.summary.contains("→ 200")));
    assert_eq!(outside[3].attempt, 2);
}

#[tokio::test]
async fn giving_up_makes_a_failed_call_again_and_never_one_that_answered() {
    let failing = std::sync::atomic::AtomicBool::new(true);
    let server = HttpServer::start(move |request| {
        if request.path == "/busy" && failing.swap(false, std::sync::atomic::Ordering::SeqCst) {
            Reply::status(503, "busy")
        } else {
            Reply::status(200, "ok")
        }
    })
    .await;
    let runtime = runtime();
    let sandbox = sandbox(Some(&server.url()));
    // The lambda answered 200 twice, then gave up for reasons of its own:
    // its retry sends nothing again.
    let durable = support::prepare(&runtime, samples::DURABLE).await;
    let plan = json!({"url": server.url(), "posts": 2, "give_up": true});
    let mut journal = Vec::new();
    let first = attempt(&durable, &sandbox, &plan, 1, &mut journal).await;
    assert!(
        matches!(first.outcome, Outcome::Retriable { .. }),
        "{:?}",
        first.outcome
    );
    output(&attempt(&durable, &sandbox, &plan, 2, &mut journal).await);
    assert_eq!(server.requests().len(), 2);
    // A webhook answered 503 gives up: its retry makes that call again.
    let webhook = support::prepare(&runtime, samples::WEBHOOK).await;
    let call = json!({"url": format!("{}/busy", server.url())});
    let mut journal = Vec::new();
    let first = attempt(&webhook, &sandbox, &call, 1, &mut journal).await;
    assert!(
        matches!(first.outcome, Outcome::Retriable { .. }),
        "{:?}",
        first.outcome
    );
    assert!(
        journal
            .iter()
            .all(|e| e.call != "wasi:http/outgoing-handler.handle")
    );
    output(&attempt(&webhook, &sandbox, &call, 2, &mut journal).await);
    let busy: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.path == "/busy")
        .collect();
    assert_eq!(busy.len(), 2);
    assert_eq!(
        busy[0].header("idempotency-key"),
        busy[1].header("idempotency-key")
    );
}

#[tokio::test]
async fn a_secret_rotated_between_attempts_still_replays() {
    let server = HttpServer::start(|_| Reply::status(200, "ok")).await;
    let runtime = runtime();
    let webhook = support::prepare(&runtime, samples::WEBHOOK).await;
    let with_token = |token: &str| Sandbox {
        secrets: Arc::new(vec![("WEBHOOK_TOKEN".into(), token.into())]),
        ..sandbox(Some(&server.url()))
    };
    let call = json!({"url": server.url()});
    let mut journal = Vec::new();
    let first = output(
        &attempt(
            &webhook,
            &with_token("tok-old-0001"),
            &call,
            1,
            &mut journal,
        )
        .await,
    );
    let second = attempt(
        &webhook,
        &with_token("tok-new-0002"),
        &call,
        2,
        &mut journal,
    )
    .await;
    assert_eq!(output(&second), first);
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_changed_call_diverges_and_nothing_live_runs_after_it() {
    let server = HttpServer::start(|_| Reply::status(200, "ok")).await;
    let runtime = runtime();
    let lambda = support::prepare(&runtime, samples::DURABLE).await;
    let sandbox = sandbox(Some(&server.url()));
    let mut journal = Vec::new();
    let plan = json!({"url": server.url(), "posts": 1});
    output(&attempt(&lambda, &sandbox, &plan, 1, &mut journal).await);
    let recorded = journal.clone();
    // The same task, but the lambda now posts somewhere else.
    let changed = json!({"url": format!("{}/elsewhere", server.url()), "posts": 1});
    let second = attempt(&lambda, &sandbox, &changed, 2, &mut journal).await;
    match &second.outcome {
        Outcome::Diverged { message } => {
            assert!(message.starts_with("diverged at entry "), "{message}");
            assert!(
                message.contains("wasi:http/outgoing-handler.handle"),
                "{message}"
            );
        }
        other => panic!("expected divergence, got {other:?}"),
    }
    assert_eq!(server.requests().len(), 1, "no request after the mismatch");
    assert_eq!(
        journal, recorded,
        "a diverged attempt leaves the journal be"
    );

    // Deployed to restart instead: the journal goes, the task starts afresh.
    let restart = Sandbox {
        on_divergence: OnDivergence::Restart,
        ..sandbox.clone()
    };
    let third = attempt(&lambda, &restart, &changed, 3, &mut journal).await;
    output(&third);
    assert_eq!(server.requests().len(), 2);
    assert!(
        journal.iter().all(|e| e.attempt == 3),
        "{:?}",
        calls(&journal)
    );
    assert!(
        third
            .log
            .render()
            .unwrap_or_default()
            .contains("journal was discarded")
    );
}

#[tokio::test]
async fn a_replayed_wait_does_not_wait() {
    let runtime = runtime();
    let lambda = support::prepare(&runtime, samples::DURABLE).await;
    let plan = json!({"sleep_ms": 2500});
    let mut journal = Vec::new();
    let started = Instant::now();
    let first = output(&attempt(&lambda, &sandbox(None), &plan, 1, &mut journal).await);
    assert!(started.elapsed() >= Duration::from_millis(2500));
    assert!(
        journal
            .iter()
            .any(|e| e.call.ends_with("subscribe-duration"))
    );
    // Given less time than the wait took, the replay still finishes.
    let hurried = Sandbox {
        limits: Limits {
            timeout: Duration::from_millis(2000),
            ..Limits::default()
        },
        ..sandbox(None)
    };
    let mut second = output(&attempt(&lambda, &hurried, &plan, 2, &mut journal).await);
    second["attempt"] = first["attempt"].clone();
    assert_eq!(second, first);
}

#[tokio::test]
async fn nans_are_canonical_so_floats_replay_exactly_anywhere() {
    let runtime = runtime();
    let lambda = support::prepare(&runtime, samples::DURABLE).await;
    let answer = output(&attempt(&lambda, &sandbox(None), &json!({}), 1, &mut Vec::new()).await);
    let floats = answer["floats"].as_array().unwrap();
    // A signalling NaN plus one, and zero over zero: the canonical NaN.
    assert_eq!(floats[1], "0x7ff8000000000000");
    assert_eq!(floats[2], "0x7ff8000000000000");
}
