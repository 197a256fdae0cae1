//! Compiles side by side: a small lambda's compile does not wait for a
//! large one's to end (each compile has threads of its own).

use std::fmt::Write;
use std::time::{Duration, Instant};

use waft_runtime::{Runtime, RuntimeConfig};

use crate::support::lambda_around;

/// A lambda whose handler traps, with `functions` more functions of some
/// arithmetic each: compiling it takes time in proportion.
fn lambda_of(functions: usize) -> Vec<u8> {
    let mut core = String::from(
        r#"(module
    (memory (export "memory") 1)
    (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) unreachable)
    (func (export "waft:lambda/handler@CURRENT#handle")
        (param i32 i32 i32 i32 i32 i32 i32 i32 i64 i32 i32) (result i32)
        unreachable)
"#,
    );
    for f in 0..functions {
        write!(core, "    (func $f{f} (param i32) (result i32) local.get 0").unwrap();
        for i in 0..60 {
            write!(
                core,
                " i32.const {i} i32.add local.get 0 i32.mul i32.const {f} i32.xor"
            )
            .unwrap();
        }
        core.push_str(")\n");
    }
    core.push(')');
    lambda_around(&core)
}

#[test]
fn a_small_compile_does_not_wait_for_a_large_one() {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // No compile cache: each compile is a compile.
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let (large, small) = (lambda_of(3_000), lambda_of(0));
    tokio.block_on(async {
        let started = Instant::now();
        let large = tokio::spawn({
            let runtime = runtime.clone();
            async move { runtime.prepare(&large).await.map(|_| started.elapsed()) }
        });
        // The large compile has spread its functions over its threads.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let small_started = Instant::now();
        runtime
            .prepare(&small)
            .await
            .expect("the small lambda compiles");
        let small_took = small_started.elapsed();
        assert!(
            !large.is_finished(),
            "the large compile ended before the small one ({small_took:?}): make it larger"
        );
        let large_took = large.await.unwrap().expect("the large lambda compiles");
        assert!(
            small_took * 4 < large_took,
            "the small compile took {small_took:?}, the large one {large_took:?}"
        );
    });
}
