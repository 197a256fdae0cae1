//! The Frontend's deploy check of a hostile component costs the Frontend
//! no more memory than the lambda's own limit allows: a start function that
//! fills two memories and grows a table to 2²⁸ elements is refused on a
//! limit, and the process's peak resident memory (`VmHWM`) grows by less
//! than twice `max_memory`.
//!
//! A test binary of its own, with one test, outside `tests/runtime/`: it
//! reads the process's own peak memory (`/proc/self/status`), which
//! anything running beside it would raise.

#[path = "runtime/support/mod.rs"]
mod support;

use support::lambda_around;
use waft_core::{ByteSize, Limits};

/// Fills two memories with 48 MiB each, then grows a table to 2²⁸
/// elements (2 GiB of host memory); traps on any refusal.
const HOSTILE_START: &str = r#"(module
    (memory (export "memory") 1)
    (memory $second 0)
    (table $t 0 funcref)
    (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) unreachable)
    (func (export "waft:lambda/handler@CURRENT#handle")
        (param i32 i32 i32 i32 i32 i32 i32 i32 i64 i32 i32) (result i32)
        unreachable)
    (func $start
        (if (i32.eq (memory.grow 0 (i32.const 768)) (i32.const -1)) (then unreachable))
        (memory.fill 0 (i32.const 65536) (i32.const 1) (i32.const 0x3000000))
        (if (i32.eq (memory.grow $second (i32.const 768)) (i32.const -1)) (then unreachable))
        (memory.fill $second (i32.const 0) (i32.const 1) (i32.const 0x3000000))
        (if (i32.eq (table.grow $t (ref.null func) (i32.const 0x10000000)) (i32.const -1))
            (then unreachable)))
    (start $start))"#;

/// This process's resident memory now and at its peak, in bytes.
fn memory() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").expect("Linux /proc");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| {
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .map_or(0, |kib| kib << 10)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

#[tokio::test]
async fn a_hostile_start_function_costs_the_frontend_less_than_twice_max_memory() {
    let wasm = lambda_around(HOSTILE_START);
    let runtime = support::on_demand_runtime();
    let limits = Limits {
        max_memory: ByteSize::mib(64),
        ..Limits::default()
    };
    // Refused once beforehand, so that one-time costs (the runtime's first
    // compilation and instantiation) are in the baseline.
    let _ = runtime.prepare_with_limits(&wasm, &limits).await;
    let (before, _) = memory();
    let refused = runtime.prepare_with_limits(&wasm, &limits).await;
    let (_, peak) = memory();
    let message = support::refused_on_a_limit(refused);
    assert!(message.contains("memory"), "{message}");
    let grown = peak.saturating_sub(before);
    assert!(
        grown < 2 * limits.max_memory.bytes(),
        "the deploy check grew the process by {} MiB",
        grown >> 20
    );
}
