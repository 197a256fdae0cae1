//! The host memory a lambda makes the platform spend outside its own linear
//! memory stays bounded: all its memories together count against
//! `max_memory`, its tables and its host resources (`wasi:http` fields,
//! pollables…) have caps of their own, and so do its memories, tables and
//! instances — at deploy, in the Frontend's trial instantiation, as at run.
//! Each breach is a limit error, not an anonymous trap.

use serde_json::json;
use waft_core::{ByteSize, Limits};
use waft_runtime::{Execution, Limit, Outcome, PreparedLambda, Runtime, RuntimeConfig};
use waft_sample_artifacts as samples;

use crate::support;
use crate::support::{lambda_around, on_demand_runtime as frontend_runtime, refused_on_a_limit};

/// What an executor runs with.
fn executor_runtime() -> Runtime {
    Runtime::new(RuntimeConfig {
        max_instances: 8,
        ..RuntimeConfig::default()
    })
    .expect("runtime")
}

/// A core module with `memories` memories besides the exported one, whose
/// start function runs `start` and whose handler runs `handle` and then
/// traps (it never answers: what matters is how it fails). Its allocator
/// hands out the first page, never freed, for the task's strings.
fn module(memories: usize, start: &str, handle: &str) -> String {
    let declared: String = (1..=memories)
        .map(|n| format!("(memory $m{n} 0)\n"))
        .collect();
    format!(
        r#"(module
            (memory (export "memory") 1)
            {declared}
            (table $t 0 funcref)
            (global $free (mut i32) (i32.const 1024))
            (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
                (local $at i32)
                (local.set $at (i32.and (i32.add (global.get $free) (i32.const 7))
                                        (i32.const -8)))
                (global.set $free (i32.add (local.get $at) (local.get 3)))
                (local.get $at))
            (func (export "waft:lambda/handler@CURRENT#handle")
                (param i32 i32 i32 i32 i32 i32 i32 i32 i64 i32 i32) (result i32)
                {handle}
                unreachable)
            (func $start {start})
            (start $start))"#
    )
}

/// Grows memory `memory` by `pages` and touches every new page; traps when
/// the growth is refused.
fn grow_and_fill(memory: &str, pages: u32) -> String {
    format!(
        "(if (i32.eq (memory.grow {memory} (i32.const {pages})) (i32.const -1))
             (then unreachable))
         (memory.fill {memory} (i32.const 65536) (i32.const 1) (i32.const {bytes}))",
        bytes = (pages - 1) * 65536,
    )
}

/// Grows the table to 2²⁸ elements; traps when the growth is refused.
const TABLE_GROWTH: &str = "(if (i32.eq (table.grow $t (ref.null func) (i32.const 0x10000000))
                                  (i32.const -1))
                               (then unreachable))";

async fn run(lambda: &PreparedLambda, payload: serde_json::Value, limits: Limits) -> Execution {
    let input = support::task("01HOSTMEMORY", "greedy", &payload);
    support::run(lambda, input, limits).await
}

/// The detail of a memory limit breach, or a failure naming the outcome.
fn memory_breach(execution: &Execution) -> &str {
    match &execution.outcome {
        Outcome::LimitExceeded {
            limit: Limit::Memory,
            detail,
        } => detail,
        other => panic!("expected a memory limit breach, got {other:?}"),
    }
}

#[tokio::test]
async fn a_start_function_that_grows_a_table_to_2_28_elements_is_refused_at_deploy() {
    let wasm = lambda_around(&module(0, TABLE_GROWTH, ""));
    for runtime in [frontend_runtime(), executor_runtime()] {
        let message = refused_on_a_limit(runtime.prepare(&wasm).await);
        assert!(message.contains("table"), "{message}");
    }
}

#[tokio::test]
async fn a_handler_that_grows_a_table_to_2_28_elements_breaches_a_limit() {
    let wasm = lambda_around(&module(0, "", TABLE_GROWTH));
    for runtime in [frontend_runtime(), executor_runtime()] {
        let lambda = runtime.prepare(&wasm).await.expect("it deploys");
        let execution = run(&lambda, json!({}), Limits::default()).await;
        assert!(
            memory_breach(&execution).contains("table"),
            "{:?}",
            execution.outcome
        );
    }
}

#[tokio::test]
async fn sixty_four_memories_are_refused_at_deploy() {
    let start: String = (1..=63)
        .map(|n| grow_and_fill(&format!("$m{n}"), 2))
        .collect();
    let wasm = lambda_around(&module(63, &start, ""));
    let message = refused_on_a_limit(frontend_runtime().prepare(&wasm).await);
    assert!(message.contains("memor"), "{message}");
}

#[tokio::test]
async fn the_memories_of_an_instance_count_together() {
    // Each memory alone fits in 24 MiB; the two together do not.
    let handle = format!("{}{}", grow_and_fill("0", 256), grow_and_fill("$m1", 256));
    let wasm = lambda_around(&module(1, "", &handle));
    // Two memories in one module: more than the pooling allocator takes.
    let lambda = frontend_runtime().prepare(&wasm).await.expect("it deploys");
    let tight = Limits {
        max_memory: ByteSize::mib(24),
        ..Limits::default()
    };
    let execution = run(&lambda, json!({}), tight).await;
    assert!(
        memory_breach(&execution).contains("24"),
        "{:?}",
        execution.outcome
    );
    // With room for both, the handler gets past its growths and traps on
    // its own; the peak is the two memories together.
    let roomy = Limits {
        max_memory: ByteSize::mib(40),
        ..Limits::default()
    };
    let execution = run(&lambda, json!({}), roomy).await;
    assert!(
        matches!(execution.outcome, Outcome::Trapped { .. }),
        "{:?}",
        execution.outcome
    );
    assert!(
        execution.peak_memory >= 32 << 20,
        "peak {} bytes",
        execution.peak_memory
    );
}

#[tokio::test]
async fn the_deploy_check_runs_under_the_lambdas_own_memory_limit() {
    // Start-up grows two memories to 40 MiB each: over a 64 MiB limit
    // together, within a 128 MiB one.
    let start = format!("{}{}", grow_and_fill("0", 640), grow_and_fill("$m1", 640));
    let wasm = lambda_around(&module(1, &start, ""));
    let runtime = frontend_runtime();
    let small = Limits {
        max_memory: ByteSize::mib(64),
        ..Limits::default()
    };
    let message = refused_on_a_limit(runtime.prepare_with_limits(&wasm, &small).await);
    assert!(message.contains("memory"), "{message}");
    let large = Limits {
        max_memory: ByteSize::mib(128),
        ..Limits::default()
    };
    runtime
        .prepare_with_limits(&wasm, &large)
        .await
        .expect("within the lambda's limit, it deploys");
}

#[tokio::test]
async fn the_deploy_check_runs_under_the_lambdas_own_fuel_limit() {
    // Start-up counts down from a million: more than ten thousand units.
    let start = "(local $left i32)
        (local.set $left (i32.const 1000000))
        (loop $again
            (local.set $left (i32.sub (local.get $left) (i32.const 1)))
            (br_if $again (local.get $left)))";
    let wasm = lambda_around(&module(0, start, ""));
    let runtime = frontend_runtime();
    let frugal = Limits {
        fuel: Some(10_000),
        ..Limits::default()
    };
    let message = refused_on_a_limit(runtime.prepare_with_limits(&wasm, &frugal).await);
    assert!(message.contains("fuel"), "{message}");
    runtime
        .prepare_with_limits(&wasm, &Limits::default())
        .await
        .expect("without a fuel limit, it deploys");
}

#[tokio::test]
async fn ten_million_fields_handles_breach_the_host_resource_cap() {
    let wasm = std::fs::read(samples::GREEDY).expect("sample built");
    let runtime = executor_runtime();
    let lambda = runtime.prepare(&wasm).await.expect("it deploys");
    let execution = run(
        &lambda,
        json!({"attack": "fields", "count": 10_000_000}),
        Limits::default(),
    )
    .await;
    let detail = memory_breach(&execution);
    assert!(detail.contains("host resources"), "{detail}");
    // A lambda that keeps a reasonable number of them is untouched.
    let execution = run(
        &lambda,
        json!({"attack": "fields", "count": 1_000}),
        Limits::default(),
    )
    .await;
    match execution.outcome {
        Outcome::Success {
            output: Some(output),
        } => assert_eq!(output, br#"{"done":1000}"#),
        other => panic!("expected success, got {other:?}"),
    }
}
