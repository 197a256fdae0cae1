//! Every sample lambda in the real runtime, and every limit once within and
//! once over.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};
use support::{lambda_around, prepare};
use waft_core::{ByteSize, Limits};
use waft_runtime::{
    Execution, KillSwitch, LeaseLost, Limit, LogSource, Outcome, PreparedLambda, RecordingHost,
    Runtime, RuntimeConfig, Sandbox, ScheduleRejection, TaskHost, TaskInput,
};
use waft_sample_artifacts as samples;

fn runtime() -> Runtime {
    Runtime::new(RuntimeConfig::default()).expect("runtime")
}

fn task(lambda: &str, payload: Value) -> TaskInput {
    TaskInput {
        id: "01TEST".into(),
        lambda: lambda.into(),
        collection: "default".into(),
        priority: 0,
        attempt: 1,
        scheduled_at: SystemTime::now(),
        payload: if payload.is_null() {
            Vec::new()
        } else {
            payload.to_string().into_bytes()
        },
    }
}

async fn run_with(
    path: &str,
    input: TaskInput,
    limits: Limits,
    host: Arc<dyn TaskHost>,
) -> Execution {
    let runtime = runtime();
    let lambda = prepare(&runtime, path).await;
    lambda
        .run(input, &Sandbox::from(limits), host, &KillSwitch::new())
        .await
}

async fn run(path: &str, payload: Value, limits: Limits) -> Execution {
    run_with(
        path,
        task("sample", payload),
        limits,
        Arc::new(RecordingHost::default()),
    )
    .await
}

/// Runs `input` with default limits, a local host and a switch nobody pulls.
async fn run_default(lambda: &PreparedLambda, input: TaskInput) -> Execution {
    let host = Arc::new(RecordingHost::default());
    lambda
        .run(input, &Sandbox::default(), host, &KillSwitch::new())
        .await
}

fn output_json(execution: &Execution) -> Value {
    match &execution.outcome {
        Outcome::Success {
            output: Some(bytes),
        } => serde_json::from_slice(bytes).expect("JSON output"),
        other => panic!(
            "expected success with output, got {other:?}; log: {:?}",
            execution.log
        ),
    }
}

fn messages(execution: &Execution) -> Vec<String> {
    execution
        .log
        .records
        .iter()
        .map(|r| format!("{} {}", r.source, r.message))
        .collect()
}

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
async fn sleepy_heartbeats_with_progress() {
    let host = Arc::new(RecordingHost::default());
    let execution = run_with(
        samples::SLEEPY,
        task("sleepy", json!({"steps": 3, "step_ms": 5})),
        Limits::default(),
        host.clone(),
    )
    .await;
    assert_eq!(output_json(&execution), json!({"steps": 3}));
    assert_eq!(host.heartbeats(), 3);
    assert_eq!(host.last_progress().as_deref(), Some("step 3 of 3"));
}

#[tokio::test]
async fn chain_schedules_children_through_the_host() {
    let host = Arc::new(RecordingHost::default());
    let mut input = task("chain", json!({"lambda": "hello", "names": ["a", "b"]}));
    input.collection = "batch".into();
    let execution = run_with(samples::CHAIN, input, Limits::default(), host.clone()).await;
    assert_eq!(
        output_json(&execution),
        json!({"children": ["local-child-1", "local-child-2"]})
    );
    let children = host.children();
    assert_eq!(children.len(), 2);
    assert_eq!(children[0].lambda, "hello");
    assert_eq!(children[1].payload, br#"{"name":"b"}"#);
    assert_eq!(children[0].collection.as_deref(), Some("batch"));
}

/// A host that refuses every child, as the platform does for an unknown lambda.
struct RefusingHost;

#[async_trait::async_trait]
impl TaskHost for RefusingHost {
    async fn heartbeat(&self, _: Option<String>) -> Result<(), LeaseLost> {
        Ok(())
    }
    async fn schedule(
        &self,
        child: waft_runtime::ChildRequest,
    ) -> Result<String, ScheduleRejection> {
        Err(ScheduleRejection::Invalid(format!(
            "unknown lambda {}",
            child.lambda
        )))
    }
}

#[tokio::test]
async fn a_refused_child_reaches_the_lambda_as_a_value() {
    let input = task("chain", json!({"lambda": "nope", "names": ["a"]}));
    let execution = run_with(
        samples::CHAIN,
        input,
        Limits::default(),
        Arc::new(RefusingHost),
    )
    .await;
    assert_eq!(
        execution.outcome,
        Outcome::Fatal {
            message: "unknown lambda nope".into()
        }
    );
}

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

#[tokio::test]
async fn the_kill_switch_stops_a_runaway_within_50ms() {
    let runtime = runtime();
    let lambda = prepare(&runtime, samples::RUNAWAY).await;
    let kill = KillSwitch::new();
    let running = {
        let kill = kill.clone();
        tokio::spawn(async move {
            lambda
                .run(
                    task("runaway", Value::Null),
                    &Sandbox::default(),
                    Arc::new(RecordingHost::default()),
                    &kill,
                )
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!running.is_finished(), "runaway ended by itself");
    let pulled = Instant::now();
    kill.kill("lease lost");
    let execution = running.await.unwrap();
    let latency = pulled.elapsed();
    assert_eq!(
        execution.outcome,
        Outcome::Killed {
            reason: "lease lost".into()
        }
    );
    assert!(latency < Duration::from_millis(50), "kill took {latency:?}");
}

/// A host whose watchdog decides, during the first heartbeat, that the lease
/// is gone: it pulls the kill switch and lets the call return.
struct LosingHost {
    kill: KillSwitch,
    heartbeats: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl TaskHost for LosingHost {
    async fn heartbeat(&self, _: Option<String>) -> Result<(), LeaseLost> {
        self.heartbeats
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.kill.kill("three heartbeats failed");
        Ok(())
    }
    async fn schedule(&self, _: waft_runtime::ChildRequest) -> Result<String, ScheduleRejection> {
        unreachable!("sleepy schedules nothing")
    }
}

#[tokio::test]
async fn a_killed_instance_makes_no_further_host_calls() {
    let runtime = runtime();
    let lambda = prepare(&runtime, samples::SLEEPY).await;
    let kill = KillSwitch::new();
    let host = Arc::new(LosingHost {
        kill: kill.clone(),
        heartbeats: Default::default(),
    });
    let execution = lambda
        .run(
            task("sleepy", json!({"steps": 5, "step_ms": 0})),
            &Sandbox::default(),
            host.clone(),
            &kill,
        )
        .await;
    assert_eq!(
        execution.outcome,
        Outcome::Killed {
            reason: "three heartbeats failed".into()
        }
    );
    assert_eq!(host.heartbeats.load(std::sync::atomic::Ordering::SeqCst), 1);
    // The only record is the one logged before the kill.
    assert_eq!(messages(&execution), ["info finished step 1"]);
}

/// A lambda that heartbeats, then reads the variable `KEY` through
/// `wasi:config` and answers success with its value: hand-written (no
/// sample reads its configuration after a heartbeat), a core module in WAT
/// around the `lambda` world. Its task's flattened parameters: three
/// strings (pointer, length), priority, attempt, scheduled-at, payload.
/// Each import writes its answer at the address it is given last; the
/// outcome it returns is at 256 (aligned to 8, its payload at 264).
const READS_CONFIG_AFTER_A_HEARTBEAT: &str = r#"(module
    (import "waft:lambda/heartbeat@CURRENT" "beat" (func $beat (param i32 i32 i32 i32)))
    (import "wasi:config/store@0.2.0-rc.1" "get" (func $get (param i32 i32 i32)))
    (memory (export "memory") 1)
    (data (i32.const 16) "KEY")
    (global $free (mut i32) (i32.const 1024))
    (func (export "cabi_realloc") (param i32 i32) (param $align i32) (param $size i32)
        (result i32)
        (local $at i32)
        (local.set $at (i32.and
            (i32.add (global.get $free) (i32.sub (local.get $align) (i32.const 1)))
            (i32.sub (i32.const 0) (local.get $align))))
        (global.set $free (i32.add (local.get $at) (local.get $size)))
        (local.get $at))
    (func (export "waft:lambda/handler@CURRENT#handle")
        (param i32 i32 i32 i32 i32 i32 i32 i32 i64 i32 i32) (result i32)
        ;; beat(none)
        (call $beat (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 64))
        ;; get("KEY"): result<option<string>, error>, the option at 132
        (call $get (i32.const 16) (i32.const 3) (i32.const 128))
        ;; success(that option)
        (i32.store8 (i32.const 264) (i32.load8_u (i32.const 132)))
        (i32.store (i32.const 268) (i32.load (i32.const 136)))
        (i32.store (i32.const 272) (i32.load (i32.const 140)))
        (i32.const 256)))"#;

/// `wasi:config` is a capability like the others: once the execution is
/// stopped, a read of its configuration traps instead of being answered.
#[tokio::test]
async fn a_killed_instance_reads_no_configuration() {
    let runtime = runtime();
    let lambda = runtime
        .prepare(&lambda_around(READS_CONFIG_AFTER_A_HEARTBEAT))
        .await
        .expect("the lambda prepares");
    let sandbox = Sandbox {
        grants: Arc::new(waft_core::Grants {
            env: [("KEY".to_owned(), "a value".to_owned())].into(),
            ..waft_core::Grants::default()
        }),
        ..Sandbox::default()
    };
    // Running, it reads its variable.
    let execution = lambda
        .run(
            task("config", Value::Null),
            &sandbox,
            Arc::new(RecordingHost::default()),
            &KillSwitch::new(),
        )
        .await;
    assert_eq!(
        execution.outcome,
        Outcome::Success {
            output: Some(b"a value".to_vec())
        }
    );
    // Killed during its heartbeat, it does not.
    let kill = KillSwitch::new();
    let host = Arc::new(LosingHost {
        kill: kill.clone(),
        heartbeats: Default::default(),
    });
    let execution = lambda
        .run(task("config", Value::Null), &sandbox, host.clone(), &kill)
        .await;
    assert_eq!(
        execution.outcome,
        Outcome::Killed {
            reason: "three heartbeats failed".into()
        }
    );
    assert_eq!(host.heartbeats.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_sleeping_instance_is_killed_at_once() {
    let runtime = runtime();
    let lambda = prepare(&runtime, samples::SLEEPY).await;
    let kill = KillSwitch::new();
    let killer = kill.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        killer.kill("lease lost");
    });
    let started = Instant::now();
    let execution = lambda
        .run(
            task("sleepy", json!({"steps": 1, "step_ms": 60_000})),
            &Sandbox::default(),
            Arc::new(RecordingHost::default()),
            &kill,
        )
        .await;
    assert_eq!(execution.outcome.kind(), "killed");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tasks_run_at_once_each_in_its_own_instance() {
    let runtime = runtime();
    let lambda = prepare(&runtime, samples::HELLO).await;
    let mut handles = Vec::new();
    for i in 0..64 {
        let lambda = lambda.clone();
        handles.push(tokio::spawn(async move {
            run_default(&lambda, task("hello", json!({"name": format!("n{i}")}))).await
        }));
    }
    for (i, handle) in handles.into_iter().enumerate() {
        let execution = handle.await.unwrap();
        assert_eq!(output_json(&execution)["greeting"], format!("Hello, n{i}!"));
    }
}

#[tokio::test]
async fn the_on_demand_allocator_runs_the_same_lambdas() {
    let runtime = Runtime::new(RuntimeConfig {
        allocator: waft_runtime::Allocator::OnDemand,
        ..RuntimeConfig::default()
    })
    .unwrap();
    assert!(!runtime.is_pooling());
    let lambda = prepare(&runtime, samples::HELLO).await;
    let execution = run_default(&lambda, task("hello", Value::Null)).await;
    assert_eq!(
        output_json(&execution),
        json!({"greeting": "Hello, world!"})
    );
}

#[tokio::test]
async fn compiled_artifacts_are_cached_on_disk_by_content() {
    let dir = tempfile::tempdir().unwrap();
    let config = RuntimeConfig {
        cache_dir: Some(dir.path().to_owned()),
        ..RuntimeConfig::default()
    };
    let wasm = std::fs::read(samples::HELLO).unwrap();

    let first = Runtime::new(config.clone())
        .unwrap()
        .prepare(&wasm)
        .await
        .unwrap();
    let files: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1);
    let name = files[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with(&first.digest().to_string()), "{name}");

    // A second runtime loads the artifact instead of compiling.
    let started = Instant::now();
    let cached = Runtime::new(config.clone())
        .unwrap()
        .prepare(&wasm)
        .await
        .unwrap();
    let load_time = started.elapsed();
    let execution = run_default(&cached, task("hello", Value::Null)).await;
    assert_eq!(execution.outcome.kind(), "success");
    println!("prepared from cache in {load_time:?}");

    // A corrupt artifact is replaced, not trusted.
    std::fs::write(&files[0], b"garbage").unwrap();
    let recompiled = Runtime::new(config).unwrap().prepare(&wasm).await.unwrap();
    let execution = run_default(&recompiled, task("hello", Value::Null)).await;
    assert_eq!(execution.outcome.kind(), "success");
    assert!(std::fs::read(&files[0]).unwrap().len() > 1000);
}

#[tokio::test]
async fn a_full_pool_is_a_host_error_not_the_lambdas() {
    let runtime = Runtime::new(RuntimeConfig {
        max_instances: 1,
        allocator: waft_runtime::Allocator::Pooling,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let sleepy = prepare(&runtime, samples::SLEEPY).await;
    let hello = prepare(&runtime, samples::HELLO).await;
    let kill = KillSwitch::new();
    let sleeper_host = Arc::new(RecordingHost::default());
    let holder = {
        let kill = kill.clone();
        let host = sleeper_host.clone();
        tokio::spawn(async move {
            let input = task("sleepy", json!({"steps": 100_000, "step_ms": 20}));
            sleepy.run(input, &Sandbox::default(), host, &kill).await
        })
    };
    // Once the sleeper has heartbeaten it is running, so it holds the only slot.
    let deadline = Instant::now() + Duration::from_secs(10);
    while sleeper_host.heartbeats() == 0 {
        assert!(Instant::now() < deadline, "the sleeper never started");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let refused = run_default(&hello, task("hello", Value::Null)).await;
    assert!(
        matches!(refused.outcome, Outcome::HostError { .. }),
        "{:?}",
        refused.outcome
    );
    kill.kill("test over");
    assert_eq!(holder.await.unwrap().outcome.kind(), "killed");
    // The slot is free again.
    let execution = run_default(&hello, task("hello", Value::Null)).await;
    assert_eq!(execution.outcome.kind(), "success");
}
