//! The contract's versions: a lambda built against `waft:lambda@0.1.0`
//! runs unchanged beside current ones, and a current lambda imports only
//! the capabilities it uses, one interface each. The current version is the
//! one `wit/lambda.wit` holds: the host runs it as its newest, and the
//! SDKs build against it.

use std::sync::Arc;
use std::time::SystemTime;

use waft_runtime::{
    KillSwitch, LogSource, Outcome, PreparedLambda, RecordingHost, Runtime, RuntimeConfig, Sandbox,
    TaskInput,
};
use waft_sample_artifacts as samples;

use crate::support;

/// The version of `waft:lambda` in `wit/lambda.wit`.
fn current_version() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../wit/lambda.wit");
    let wit = std::fs::read_to_string(path).unwrap();
    wit.lines()
        .find_map(|line| line.strip_prefix("package waft:lambda@")?.strip_suffix(';'))
        .unwrap_or_else(|| panic!("{path} names no `package waft:lambda@VERSION;`"))
        .to_owned()
}

/// `interface` of the current contract, by its full name.
fn current(interface: &str) -> String {
    format!("waft:lambda/{interface}@{}", current_version())
}

/// A handler that answers success with no output. Its task's flattened
/// parameters: three strings (pointer, length), priority, attempt,
/// scheduled-at, payload; its outcome is at 256, zeroes: `success(none)`.
const SUCCEEDS: &str = r#"(module
    (memory (export "memory") 1)
    (global $free (mut i32) (i32.const 1024))
    (func (export "cabi_realloc") (param i32 i32 i32) (param $size i32) (result i32)
        (local $at i32)
        (local.set $at (global.get $free))
        (global.set $free (i32.add (local.get $at) (i32.add (local.get $size) (i32.const 8))))
        (local.get $at))
    (func (export "waft:lambda/handler@CURRENT#handle")
        (param i32 i32 i32 i32 i32 i32 i32 i32 i64 i32 i32) (result i32)
        (i32.const 256)))"#;

#[tokio::test]
async fn a_lambda_of_another_release_of_the_current_line_runs() {
    // A release that only adds is a patch version: the host finds the
    // handler of a 0.2.9 component by the name of its own 0.2 release.
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let wasm = support::lambda_of_release(SUCCEEDS, "0.2.9");
    let lambda = runtime.prepare(&wasm).await.expect("prepares");
    let execution = lambda
        .run(
            task(b""),
            &Sandbox::default(),
            Arc::new(RecordingHost::default()),
            &KillSwitch::new(),
        )
        .await;
    assert_eq!(execution.outcome, Outcome::Success { output: None });

    // Another minor version is another contract.
    let wasm = support::lambda_of_release(SUCCEEDS, "0.3.0");
    let Err(error) = runtime.prepare(&wasm).await else {
        panic!("a 0.3.0 lambda prepared");
    };
    assert!(
        matches!(error, waft_runtime::LoadError::MissingExport { .. }),
        "{error}"
    );
}

#[test]
fn the_js_sdk_imports_the_current_contract() {
    // componentize-js matches imports by full name, so `sdk/js/waft.js` is
    // the one SDK file that spells the version.
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../sdk/js/waft.js");
    let sdk = std::fs::read_to_string(path).unwrap();
    let imports: Vec<&str> = sdk
        .lines()
        .filter_map(|line| line.split("from \"").nth(1)?.strip_suffix("\";"))
        .filter(|name| name.starts_with("waft:lambda/"))
        .collect();
    assert!(
        !imports.is_empty(),
        "{path} imports no waft:lambda interface"
    );
    for import in imports {
        let interface = import
            .strip_prefix("waft:lambda/")
            .and_then(|rest| rest.split('@').next())
            .unwrap();
        assert_eq!(
            import,
            current(interface),
            "{path} imports another contract"
        );
    }
}

fn task(payload: &[u8]) -> TaskInput {
    TaskInput {
        id: "01V01".into(),
        lambda: "hello-v0-1".into(),
        collection: "default".into(),
        priority: 0,
        attempt: 3,
        scheduled_at: SystemTime::now(),
        payload: payload.to_vec(),
        journal: Vec::new(),
    }
}

async fn prepare(path: &str) -> PreparedLambda {
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    runtime
        .prepare(&std::fs::read(path).unwrap())
        .await
        .expect("the sample prepares")
}

#[tokio::test]
async fn a_lambda_of_the_first_contract_runs_and_its_host_calls_are_answered() {
    let lambda = prepare(samples::HELLO_V0_1).await;
    assert!(
        lambda
            .imports()
            .contains(&"waft:lambda/host@0.1.0".to_owned()),
        "{:?}",
        lambda.imports()
    );

    let host = Arc::new(RecordingHost::default());
    let execution = lambda
        .run(
            task(b"Ada"),
            &Sandbox::default(),
            host.clone(),
            &KillSwitch::new(),
        )
        .await;
    assert_eq!(
        execution.outcome,
        Outcome::Success {
            output: Some(b"Hello, Ada!".to_vec())
        }
    );
    let record = &execution.log.records[0];
    assert_eq!(record.source, LogSource::Lambda(waft_runtime::Level::Info));
    assert_eq!(record.message, "greeting");
    assert_eq!(record.fields, vec![("attempt".to_owned(), "3".to_owned())]);
    assert_eq!(host.heartbeats(), 1);
    assert_eq!(host.last_progress().as_deref(), Some("half way"));

    let execution = lambda
        .run(
            task(b"child"),
            &Sandbox::default(),
            host.clone(),
            &KillSwitch::new(),
        )
        .await;
    assert_eq!(
        execution.outcome,
        Outcome::Success {
            output: Some(b"local-child-1".to_vec())
        }
    );
    assert_eq!(host.children()[0].lambda, "hello");

    let execution = lambda
        .run(task(b"fail"), &Sandbox::default(), host, &KillSwitch::new())
        .await;
    assert_eq!(
        execution.outcome,
        Outcome::Fatal {
            message: "asked to fail".into()
        }
    );
}

#[tokio::test]
async fn a_stopped_first_contract_lambda_gets_no_answer() {
    let lambda = prepare(samples::HELLO_V0_1).await;
    let kill = KillSwitch::new();
    kill.kill("fenced");
    let host = Arc::new(RecordingHost::default());
    let execution = lambda
        .run(task(b"child"), &Sandbox::default(), host.clone(), &kill)
        .await;
    assert!(
        matches!(execution.outcome, Outcome::Killed { .. }),
        "{:?}",
        execution.outcome
    );
    assert_eq!(host.children_requested(), 0);
}

#[tokio::test]
async fn a_current_lambda_imports_only_the_capabilities_it_uses() {
    // `hello` logs; `chain` logs and schedules children; neither calls HTTP.
    let hello = prepare(samples::HELLO).await.imports();
    assert!(hello.contains(&current("log")), "{hello:?}");
    for absent in [current("children"), "waft:lambda/host@0.1.0".to_owned()] {
        assert!(!hello.contains(&absent), "{hello:?}");
    }
    assert!(
        !hello.iter().any(|i| i.starts_with("wasi:http/")),
        "{hello:?}"
    );

    let chain = prepare(samples::CHAIN).await.imports();
    assert!(chain.contains(&current("children")), "{chain:?}");
}
