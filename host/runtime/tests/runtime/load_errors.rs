//! Files that are not lambdas are refused with a message naming the problem.

use waft_runtime::{LoadError, Runtime, RuntimeConfig};

use crate::support::lambda_around;

fn prepare(wasm: &[u8]) -> LoadError {
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    tokio
        .block_on(runtime.prepare(wasm))
        .expect_err("must be refused")
}

fn component(text: &str) -> Vec<u8> {
    wat::parse_str(text).expect("valid WAT")
}

#[test]
fn not_wasm() {
    assert!(matches!(prepare(b""), LoadError::Empty));
    let error = prepare(b"#!/bin/sh\necho hi\n");
    assert!(
        error.to_string().contains("not a WebAssembly file"),
        "{error}"
    );
}

#[test]
fn a_core_module_is_told_to_build_a_component() {
    let error = prepare(&wat::parse_str("(module)").unwrap());
    assert!(error.to_string().contains("wasm32-wasip2"), "{error}");
}

#[test]
fn a_truncated_component_is_invalid() {
    let wasm = std::fs::read(waft_sample_artifacts::HELLO).unwrap();
    let error = prepare(&wasm[..wasm.len() / 2]);
    assert!(matches!(error, LoadError::Invalid(_)), "{error}");
}

#[test]
fn a_component_of_another_world_names_the_missing_export() {
    let error = prepare(&component(
        r#"(component
            (core module $m (func (export "f")))
            (core instance $i (instantiate $m))
            (func (export "run") (canon lift (core func $i "f"))))"#,
    ));
    let message = error.to_string();
    for handler in waft_runtime::HANDLER_EXPORTS {
        assert!(message.contains(handler), "{message}");
    }
    assert!(message.contains("its exports: run"), "{message}");
}

const HANDLER_OF_WRONG_TYPE: &str = r#"
    (core module $m (func (export "handle")))
    (core instance $i (instantiate $m))
    (func $f (canon lift (core func $i "handle")))
    (instance $h (export "handle" (func $f)))
    (export "waft:lambda/handler@0.1.0" (instance $h))"#;

#[test]
fn a_handler_of_the_wrong_type_is_a_mismatch() {
    let error = prepare(&component(&format!("(component {HANDLER_OF_WRONG_TYPE})")));
    assert!(matches!(error, LoadError::ExportMismatch { .. }), "{error}");
}

#[test]
fn an_import_waft_does_not_provide_is_named() {
    let error = prepare(&component(&format!(
        r#"(component
            (import "acme:vault/secrets" (instance (export "get" (func (param "key" string) (result string)))))
            {HANDLER_OF_WRONG_TYPE})"#
    )));
    let message = error.to_string();
    assert!(
        matches!(error, LoadError::UnsupportedImport { .. }),
        "{message}"
    );
    assert!(message.contains("acme:vault/secrets"), "{message}");
}

/// A handler of the right type whose module never finishes starting: its
/// start function loops. Its task's flattened parameters: three strings
/// (pointer, length), priority, attempt, scheduled-at, payload.
const ENDLESS_START: &str = r#"(module
    (memory (export "memory") 1)
    (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) unreachable)
    (func (export "waft:lambda/handler@CURRENT#handle")
        (param i32 i32 i32 i32 i32 i32 i32 i32 i64 i32 i32) (result i32)
        unreachable)
    (func $spin (loop $again (br $again)))
    (start $spin))"#;

#[test]
fn a_start_up_that_never_ends_is_refused_within_the_start_up_limit() {
    let runtime = Runtime::new(RuntimeConfig {
        max_startup: std::time::Duration::from_millis(300),
        ..RuntimeConfig::default()
    })
    .unwrap();
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    let error = tokio
        .block_on(runtime.prepare(&lambda_around(ENDLESS_START)))
        .expect_err("must be refused");
    assert!(matches!(error, LoadError::SlowStartup { .. }), "{error}");
    assert!(error.to_string().contains("300ms"), "{error}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "refused only after {:?}",
        started.elapsed()
    );
}
