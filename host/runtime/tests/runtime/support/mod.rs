//! Set-up shared by the tests of Waft's runtime:
//!
//! - [`on_demand_runtime`]: the runtime the Frontend deploys with;
//! - [`lambda_around`]: a lambda built around a hand-written core module;
//! - [`prepare`], [`task`] and [`run`]: a sample prepared and run on one
//!   task, its host calls recorded; [`run_journaled`] and [`apply`]: run
//!   from a journal kept as the store keeps it;
//! - [`output`] and [`refused_on_a_limit`]: what a run answered, and why a
//!   deploy was refused.

// Each of the runtime's test binaries (`runtime`, and the three that read
// the whole process's state) uses only some of it.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::SystemTime;

use serde_json::Value;
use waft_core::Limits;
use waft_runtime::{
    Allocator, Execution, KillSwitch, LoadError, Outcome, PreparedLambda, RecordingHost, Runtime,
    RuntimeConfig, Sandbox, TaskInput,
};

/// What the Frontend deploys with: no pool, instances allocated on demand.
pub fn on_demand_runtime() -> Runtime {
    Runtime::new(RuntimeConfig {
        allocator: Allocator::OnDemand,
        ..RuntimeConfig::default()
    })
    .expect("runtime")
}

/// A component of the current `lambda` world around `core`, a core module
/// in WAT that exports what the world's handler lowers to. `core` writes
/// the contract's version as `@CURRENT` (`waft:lambda/handler@CURRENT#handle`),
/// so that it follows `wit/lambda.wit`.
pub fn lambda_around(core: &str) -> Vec<u8> {
    lambda_of(
        core,
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../wit").as_ref(),
    )
}

/// [`lambda_around`], of the `lambda` world of another release of the
/// contract: `wit/lambda.wit` with its package's version made `version`.
pub fn lambda_of_release(core: &str, version: &str) -> Vec<u8> {
    let wit = concat!(env!("CARGO_MANIFEST_DIR"), "/../../wit");
    let text = std::fs::read_to_string(format!("{wit}/lambda.wit")).unwrap();
    let (_, rest) = text.split_once("package waft:lambda@").unwrap();
    let (current, _) = rest.split_once(';').unwrap();
    let text = text.replace(
        &format!("package waft:lambda@{current};"),
        &format!("package waft:lambda@{version};"),
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("lambda.wit"), text).unwrap();
    std::os::unix::fs::symlink(format!("{wit}/deps"), dir.path().join("deps")).unwrap();
    lambda_of(core, dir.path())
}

fn lambda_of(core: &str, wit: &std::path::Path) -> Vec<u8> {
    use wit_component::{ComponentEncoder, StringEncoding, embed_component_metadata};
    let mut resolve = wit_parser::Resolve::default();
    let (package, _) = resolve.push_path(wit).expect("the WIT parses");
    let world = resolve
        .select_world(&[package], Some("lambda"))
        .expect("the lambda world");
    let version = resolve.packages[package].name.version.as_ref();
    let version = version.expect("the contract has a version").to_string();
    let core = core.replace("@CURRENT", &format!("@{version}"));
    let mut module = wat::parse_str(&core).expect("valid WAT");
    embed_component_metadata(&mut module, &resolve, world, StringEncoding::UTF8)
        .expect("metadata embeds");
    ComponentEncoder::default()
        .validate(true)
        .module(&module)
        .expect("the module fits the world")
        .encode()
        .expect("a component")
}

/// The sample at `path`, prepared by `runtime`.
pub async fn prepare(runtime: &Runtime, path: &str) -> PreparedLambda {
    let wasm = std::fs::read(path).expect("sample built");
    runtime.prepare(&wasm).await.expect("sample prepares")
}

/// Task `id` of `lambda`, its first attempt, due now, with `payload` as
/// JSON.
pub fn task(id: &str, lambda: &str, payload: &Value) -> TaskInput {
    TaskInput {
        id: id.into(),
        lambda: lambda.into(),
        collection: "default".into(),
        priority: 0,
        attempt: 1,
        scheduled_at: SystemTime::now(),
        payload: payload.to_string().into_bytes(),
        journal: Vec::new(),
    }
}

/// Runs `input` on `lambda` within `limits`, its host calls recorded.
pub async fn run(lambda: &PreparedLambda, input: TaskInput, limits: Limits) -> Execution {
    lambda
        .run(
            input,
            &Sandbox::from(limits),
            Arc::new(RecordingHost::default()),
            &KillSwitch::new(),
        )
        .await
}

/// The JSON a successful run answered, or a failure naming the outcome.
pub fn output(execution: &Execution) -> Value {
    match &execution.outcome {
        Outcome::Success {
            output: Some(bytes),
        } => serde_json::from_slice(bytes).unwrap(),
        other => panic!("expected success, got {other:?}; log {:?}", execution.log),
    }
}

/// The detail of a deploy refused on a limit, or a failure naming the
/// result.
pub fn refused_on_a_limit(prepared: Result<PreparedLambda, LoadError>) -> String {
    match prepared {
        Err(error @ LoadError::LimitExceeded { .. }) => error.to_string(),
        Err(other) => panic!("expected a refusal on a limit, got: {other}"),
        Ok(_) => panic!("a component over its limits was accepted"),
    }
}

/// Runs `input` on `lambda` in `sandbox`, answered from `journal` (its
/// task's journal in the store), and brings `journal` to what the
/// execution left: its durability points' writes, then its result's.
pub async fn run_journaled(
    lambda: &PreparedLambda,
    input: TaskInput,
    sandbox: &Sandbox,
    journal: &mut Vec<waft_core::model::JournalEntry>,
) -> Execution {
    let host = Arc::new(RecordingHost::default());
    run_journaled_on(lambda, input, sandbox, journal, host).await
}

/// [`run_journaled`] with `host` as the platform (the signals it was sent).
pub async fn run_journaled_on(
    lambda: &PreparedLambda,
    mut input: TaskInput,
    sandbox: &Sandbox,
    journal: &mut Vec<waft_core::model::JournalEntry>,
    host: Arc<RecordingHost>,
) -> Execution {
    input.journal = journal.clone();
    // The host may have served earlier executions: only this one's writes.
    let earlier = host.journal_writes().len();
    let execution = lambda
        .run(input, sandbox, host.clone(), &KillSwitch::new())
        .await;
    for write in host.journal_writes().iter().skip(earlier) {
        apply(journal, write);
    }
    apply(journal, &execution.journal);
    execution
}

/// The store's side of a journal: `write` applied to `journal`.
pub fn apply(
    journal: &mut Vec<waft_core::model::JournalEntry>,
    write: &waft_core::model::JournalWrite,
) {
    journal.truncate(write.from as usize);
    for entry in &write.entries {
        assert_eq!(
            entry.seq as usize,
            journal.len(),
            "entries run on from `from` ({}): {:?} onto {:?}",
            write.from,
            write
                .entries
                .iter()
                .map(|e| (e.seq, &e.call))
                .collect::<Vec<_>>(),
            journal.iter().map(|e| (e.seq, &e.call)).collect::<Vec<_>>(),
        );
        journal.push(entry.clone());
    }
}
