//! Guests on threads of their own: the same outcomes as on the caller's
//! runtime, at a lower priority; an instance stops at its fence while its
//! caller is stuck; compiling leaves the caller's runtime free.
//!
//! A test binary of its own, outside `tests/runtime/`: it reads the nice
//! values of the process's own threads (`/proc/self/task`) by their names,
//! which the guest threads of runtimes in other tests would share.

#[path = "runtime/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde_json::json;
use support::prepare;
use waft_core::Limits;
use waft_runtime::{
    Execution, KillSwitch, Limit, Outcome, PreparedLambda, RecordingHost, Runtime, RuntimeConfig,
    Sandbox, TaskInput,
};
use waft_sample_artifacts as samples;

fn task(payload: serde_json::Value) -> TaskInput {
    support::task("01TEST", "sample", &payload)
}

/// Runs `runaway` (without end) on the guest threads, owning everything,
/// so that it can be spawned.
async fn runaway_on_guest_threads(
    runaway: PreparedLambda,
    limits: Limits,
    kill: KillSwitch,
) -> Execution {
    runaway
        .run_on_guest_threads(
            task(json!({})),
            &Sandbox::from(limits),
            Arc::new(RecordingHost::default()),
            &kill,
        )
        .await
}

fn assert_deadline(execution: &Execution) {
    assert!(
        matches!(
            execution.outcome,
            Outcome::LimitExceeded {
                limit: Limit::Deadline,
                ..
            }
        ),
        "{:?}",
        execution.outcome
    );
}

/// The nice values of this process's threads named `name` (Linux).
fn nice_of_threads(name: &str) -> Vec<i64> {
    let mut nice = Vec::new();
    for entry in std::fs::read_dir("/proc/self/task").expect("procfs") {
        let dir = entry.expect("a thread").path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        // Fields after the parenthesised command: state is field 3, nice 19.
        let after = &stat[stat.rfind(')').expect("a stat line") + 2..];
        let fields: Vec<&str> = after.split_whitespace().collect();
        nice.push(fields[16].parse().expect("a nice value"));
    }
    nice
}

// One worker on the caller's side: were guests run there, a computing
// guest would hold it for a tick at a time.
#[tokio::test(flavor = "current_thread")]
async fn outcomes_are_those_of_the_callers_runtime() {
    let runtime = Runtime::new(RuntimeConfig::default()).expect("runtime");
    let hello = prepare(&runtime, samples::HELLO).await;
    let host = Arc::new(RecordingHost::default());
    let execution = hello
        .run_on_guest_threads(
            task(json!({"name": "Ada"})),
            &Sandbox::default(),
            host,
            &KillSwitch::new(),
        )
        .await;
    assert!(
        matches!(&execution.outcome, Outcome::Success { output: Some(out) } if out == br#"{"greeting":"Hello, Ada!"}"#),
        "{:?}",
        execution.outcome
    );
    assert_eq!(execution.log.records.len(), 1);

    let runaway = prepare(&runtime, samples::RUNAWAY).await;
    let limits = Limits {
        timeout: Duration::from_millis(200),
        ..Limits::default()
    };
    let execution = runaway_on_guest_threads(runaway, limits, KillSwitch::new()).await;
    assert_deadline(&execution);
}

#[tokio::test(flavor = "current_thread")]
async fn computing_guests_run_on_their_own_threads_at_a_lower_priority() {
    let runtime = Runtime::new(RuntimeConfig {
        guest_threads: 2,
        guest_nice: 7,
        ..RuntimeConfig::default()
    })
    .expect("runtime");
    let runaway = prepare(&runtime, samples::RUNAWAY).await;
    let limits = Limits {
        timeout: Duration::from_millis(600),
        ..Limits::default()
    };
    let kill = KillSwitch::new();
    // Spawned on this runtime: only the waiting happens here.
    let mut guests = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let runaway = runaway.clone();
        let kill = kill.clone();
        guests.spawn(runaway_on_guest_threads(runaway, limits, kill));
    }
    // While they compute, look at the threads they run on.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let nice = nice_of_threads("waft-guest");
    for execution in guests.join_all().await {
        assert_deadline(&execution);
    }
    // (The other test's runtime may have guest threads too, at 10.)
    assert_eq!(
        nice.iter().filter(|n| **n == 7).count(),
        2,
        "the guest threads' nice values: {nice:?}"
    );
}

// Compiling is CPU work too: it must not hold the caller's only thread
// (an executor compiles a lambda on its first task, while the watchdogs of
// its other tasks must keep heartbeating).
#[tokio::test(flavor = "current_thread")]
async fn compiling_leaves_the_callers_runtime_free() {
    let runtime = Runtime::new(RuntimeConfig::default()).expect("runtime");
    let wasm = std::fs::read(samples::WORD_STATS).expect("sample built");
    let ticks = async {
        let mut latest = Duration::ZERO;
        for _ in 0..10 {
            let asked = Instant::now();
            tokio::time::sleep(Duration::from_millis(5)).await;
            latest = latest.max(asked.elapsed() - Duration::from_millis(5));
        }
        latest
    };
    let began = Instant::now();
    // The ticks go first, so the first one is due before compiling starts.
    let (latest, prepared) = tokio::join!(ticks, async {
        let prepared = runtime.prepare(&wasm).await;
        (prepared, began.elapsed())
    });
    let (prepared, took) = prepared;
    prepared.expect("word-stats prepares");
    eprintln!("compiling took {took:?}; ticks came at most {latest:?} late");
    // Were it done on this thread, a tick would wait for all of it.
    assert!(
        latest < took / 4,
        "a tick came {latest:?} late, compiling took {took:?}"
    );
}

// The executor keeps a fence on the kill switch, just short of when the
// task's lease could lapse. Were its own runtime starved (here: blocked
// outright), nothing would pull the switch; the instance must stop itself
// at the fence, on its own thread.
#[tokio::test(flavor = "current_thread")]
async fn an_instance_stops_itself_at_its_fence_while_the_caller_is_stuck() {
    let runtime = Runtime::new(RuntimeConfig::default()).expect("runtime");
    let runaway = prepare(&runtime, samples::RUNAWAY).await;
    let kill = KillSwitch::new();
    let started = SystemTime::now();
    kill.fence_at(Instant::now() + Duration::from_millis(150));
    let limits = Limits {
        timeout: Duration::from_secs(10),
        ..Limits::default()
    };
    let guest = tokio::spawn(runaway_on_guest_threads(runaway, limits, kill.clone()));
    tokio::task::yield_now().await;
    // This runtime's only thread does nothing else for a second.
    std::thread::sleep(Duration::from_secs(1));
    let execution = guest.await.expect("the execution");
    let lasted = execution
        .ended_at
        .duration_since(started)
        .expect("it ended after it started");
    assert!(
        matches!(&execution.outcome, Outcome::Killed { reason } if reason.contains("lease may have lapsed")),
        "{:?}",
        execution.outcome
    );
    assert!(
        lasted < Duration::from_millis(500),
        "the instance ran for {lasted:?}, its fence was at 150 ms"
    );
}
