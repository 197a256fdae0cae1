//! The runtime's instances: stopped by the kill switch at once (running or
//! asleep), one per task when many run at once, from a pool or allocated on
//! demand, a full pool a host error rather than the lambda's, and compiled
//! artifacts cached on disk by content. Apart from the samples' own
//! behaviour because these checks are about the runtime around any lambda.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use waft_runtime::{
    Execution, KillSwitch, Outcome, PreparedLambda, RecordingHost, Runtime, RuntimeConfig, Sandbox,
    TaskInput,
};
use waft_sample_artifacts as samples;

use super::{output_json, runtime, task};

use crate::support::prepare;

/// Runs `input` with default limits, a local host and a switch nobody pulls.
async fn run_default(lambda: &PreparedLambda, input: TaskInput) -> Execution {
    let host = Arc::new(RecordingHost::default());
    lambda
        .run(input, &Sandbox::default(), host, &KillSwitch::new())
        .await
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
    let files = cached_artifacts(dir.path());
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

/// The compiled artifacts in a cache directory.
fn cached_artifacts(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "cwasm"))
        .collect();
    files.sort();
    files
}

/// Whoever can write the cache directory could put there an artifact of
/// another component, which wasmtime would load (its header is right):
/// native code of their choosing. A cached artifact is sealed, and one
/// whose seal does not verify is compiled again, not loaded.
#[tokio::test]
async fn a_cached_artifact_swapped_for_another_is_compiled_again() {
    let dir = tempfile::tempdir().unwrap();
    let config = RuntimeConfig {
        cache_dir: Some(dir.path().to_owned()),
        ..RuntimeConfig::default()
    };
    let hello = std::fs::read(samples::HELLO).unwrap();
    let panic = std::fs::read(samples::PANIC).unwrap();
    let runtime = Runtime::new(config.clone()).unwrap();
    let digest = runtime.prepare(&hello).await.unwrap().digest().to_string();
    runtime.prepare(&panic).await.unwrap();
    let files = cached_artifacts(dir.path());
    assert_eq!(files.len(), 2);
    let (ours, theirs): (Vec<_>, Vec<_>) = files.iter().partition(|path| {
        let name = path.file_name().unwrap().to_string_lossy();
        name.starts_with(&digest)
    });
    std::fs::copy(theirs[0], ours[0]).unwrap();
    let loaded = Runtime::new(config).unwrap().prepare(&hello).await.unwrap();
    let execution = run_default(&loaded, task("hello", Value::Null)).await;
    assert_eq!(
        execution.outcome.kind(),
        "success",
        "{:?}",
        execution.outcome
    );
    assert_ne!(
        std::fs::read(ours[0]).unwrap(),
        std::fs::read(theirs[0]).unwrap()
    );
}

/// A cache directory others may write is refused when the runtime starts,
/// with what to do about it.
#[cfg(target_os = "linux")]
#[test]
fn a_cache_directory_others_may_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    for mode in [0o777, 0o770] {
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(mode)).unwrap();
        let config = RuntimeConfig {
            cache_dir: Some(dir.path().to_owned()),
            ..RuntimeConfig::default()
        };
        let refused = Runtime::new(config).err().map(|e| e.to_string());
        assert!(
            refused.as_ref().is_some_and(|e| e.contains("chmod go-w")),
            "mode {mode:o}: {refused:?}"
        );
    }
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
