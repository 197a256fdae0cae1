//! What the fuzz targets share: one runtime, one way to run a lambda under
//! tight limits, and a Frontend over a throwaway SQLite store.
//!
//! A target's property is always the same: whatever the input, Waft answers
//! with a value (a refusal, an outcome, a status) and never panics, aborts
//! or hangs. libFuzzer reports a crash, an out-of-memory or a timeout.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use waft_core::{ByteSize, Limits};
use waft_runtime::{KillSwitch, RecordingHost, Runtime, RuntimeConfig, TaskInput};

/// A tokio runtime for the targets' async calls.
pub fn tokio() -> &'static tokio::runtime::Runtime {
    static TOKIO: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    TOKIO.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
}

/// The Waft runtime, as executors and the Frontend's deploy check use it.
pub fn runtime() -> Arc<Runtime> {
    static RUNTIME: OnceLock<Arc<Runtime>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            Arc::new(
                Runtime::new(RuntimeConfig {
                    max_instances: 8,
                    // A start-up that loops is refused after this, well
                    // within libFuzzer's timeout for one input.
                    max_startup: Duration::from_millis(500),
                    ..RuntimeConfig::default()
                })
                .expect("a runtime"),
            )
        })
        .clone()
}

/// Tight limits, so a generated infinite loop or allocation ends quickly.
pub fn tight_limits() -> Limits {
    Limits {
        max_memory: ByteSize::mib(16),
        timeout: Duration::from_millis(200),
        fuel: Some(5_000_000),
        ..Limits::default()
    }
}

/// Deploys `wasm` the way the Frontend does (compile, type-check the
/// handler, trial instantiation) and, if it is accepted, runs it once.
/// Returns whether it was accepted. With `WAFT_FUZZ_REPORT` set, prints
/// each verdict (`refused: …` or `ran: <outcome>`), so replaying a corpus
/// (`-runs=0`) shows how many inputs get past the checks.
pub fn deploy_and_run(wasm: &[u8]) -> bool {
    tokio().block_on(async {
        static REPORT: OnceLock<bool> = OnceLock::new();
        let report = *REPORT.get_or_init(|| std::env::var_os("WAFT_FUZZ_REPORT").is_some());
        let prepared = match runtime().prepare(wasm).await {
            Ok(prepared) => prepared,
            Err(refusal) => {
                if report {
                    eprintln!("refused: {refusal}");
                }
                return false;
            }
        };
        let input = TaskInput {
            id: "01FUZZ".into(),
            lambda: "fuzz".into(),
            collection: "default".into(),
            priority: 0,
            attempt: 1,
            scheduled_at: SystemTime::now(),
            payload: b"{}".to_vec(),
            journal: Vec::new(),
        };
        // Any outcome will do: what matters is that there is one.
        let execution = prepared
            .run(
                input,
                &tight_limits().into(),
                Arc::new(RecordingHost::default()),
                &KillSwitch::new(),
            )
            .await;
        if report {
            eprintln!("ran: {}", execution.outcome.kind());
        }
        true
    })
}
