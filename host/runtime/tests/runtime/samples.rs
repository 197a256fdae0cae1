//! Every sample lambda in the real runtime, and every limit once within and
//! once over.
//!
//! The checks, in `samples/`: `outcomes.rs` what each sample answers,
//! `host_calls.rs` the calls a lambda makes to its host and the test hosts
//! that answer them, `limits.rs` the sandbox's limits and walls,
//! `instances.rs` the runtime's instances (kill switch, pool, cache); this
//! file holds the runs they share.

mod host_calls;
mod instances;
mod limits;
mod outcomes;

use std::sync::Arc;
use std::time::SystemTime;

use serde_json::Value;
use waft_core::Limits;
use waft_runtime::{
    Execution, KillSwitch, Outcome, RecordingHost, Runtime, RuntimeConfig, Sandbox, TaskHost,
    TaskInput,
};

use crate::support::prepare;

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
        journal: Vec::new(),
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
