//! The generated test of the durable journal's rules (README, *Durable
//! lambdas*): random programs of the `script` sample — requests alone and
//! in flight together, clock reads, random draws, heartbeats, children and
//! waits for them, sleeps, traps and give-ups on given attempts — run by
//! the real runtime, executor, HSC and store (SQLite, in this process)
//! against a loopback server whose answers (2xx, 4xx, 429, 5xx, hang-ups,
//! some late, some of 9 MiB) are part of the case, with executions killed
//! at generated points (when the server receives a request, after the
//! n-th journal write, a part of a split write included, and after a late
//! copy of an earlier write reached the store), and the dead task
//! redriven afresh. Each execution is held against the reference model
//! (`journal_model/reference.rs`): the requests the server must and may
//! receive (never one whose answer the journal held; again, with the same
//! `Idempotency-Key`, after a hole or after giving up on its failure), how
//! it ends, what the journal it leaves still holds, what the task
//! answers, and how many children it made.
//!
//! `WAFT_JOURNAL_MODEL_CASES` (default 12) cases of up to
//! `WAFT_JOURNAL_MODEL_STEPS` (default 6) random steps after their
//! opening; `WAFT_JOURNAL_MODEL_SEED` replays a run. It prints its
//! execution and request counts, for the long runs in RELIABILITY.md.
//!
//! The parts, in `journal_model/`: `case.rs` the generated cases,
//! `reference.rs` the model, `harness.rs` what runs a case, `faults.rs` the faults
//! between the executor and the HSC, `check.rs` the run held
//! against the model.

mod case;
mod check;
mod faults;
mod harness;
mod reference;

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};

use harness::Bench;

/// Executions and requests checked, for the counts it prints.
static EXECUTIONS: AtomicU64 = AtomicU64::new(0);
static REQUESTS: AtomicU64 = AtomicU64::new(0);

fn env(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn runner() -> TestRunner {
    let config = Config {
        cases: env("WAFT_JOURNAL_MODEL_CASES", 12),
        failure_persistence: None,
        // Each case runs the real thing: shrinking one takes as long.
        max_shrink_iters: 0,
        ..Config::default()
    };
    // A run without a seed draws one, and says it, so that a failure can
    // be replayed.
    let seed: u64 = match std::env::var("WAFT_JOURNAL_MODEL_SEED") {
        Ok(seed) => seed.parse().expect("WAFT_JOURNAL_MODEL_SEED is a number"),
        Err(_) => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            (now ^ u64::from(std::process::id()).rotate_left(32)) % 1_000_000_007
        }
    };
    eprintln!("journal model: seed {seed} (WAFT_JOURNAL_MODEL_SEED={seed} replays it)");
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes))
}

#[test]
fn the_journal_follows_its_model_in_waft_dev() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    let bench = Mutex::new(Some(runtime.block_on(Bench::start())));
    let max_steps = env("WAFT_JOURNAL_MODEL_STEPS", 6) as usize;
    let result = runner().run(&case::cases(max_steps), |case| {
        let mut guard = bench.lock().unwrap();
        let bench = guard.as_mut().expect("the bench");
        let ran = runtime
            .block_on(bench.run(&case))
            .map_err(TestCaseError::fail)?;
        REQUESTS.fetch_add(ran.current.receipts.len() as u64, Ordering::Relaxed);
        let trace = format!(
            "{:#?}\nreceipts: {:?}",
            ran.current
                .executions
                .iter()
                .map(|e| (
                    e.attempt,
                    e.generation,
                    &e.before,
                    &e.committed,
                    e.killed,
                    &e.outcome
                ))
                .collect::<Vec<_>>(),
            ran.current
                .receipts
                .iter()
                .map(|r| (r.execution, &r.tag, r.n))
                .collect::<Vec<_>>()
        );
        let executions =
            check::check(&ran).map_err(|e| TestCaseError::fail(format!("{e}\n{trace}")))?;
        EXECUTIONS.fetch_add(executions as u64, Ordering::Relaxed);
        Ok(())
    });
    if let Some(bench) = bench.lock().unwrap().take() {
        runtime.block_on(bench.stop());
    }
    println!(
        "journal model: {} executions, {} requests in {:.1?}, {}",
        EXECUTIONS.load(Ordering::Relaxed),
        REQUESTS.load(Ordering::Relaxed),
        started.elapsed(),
        if result.is_ok() {
            "0 divergences"
        } else {
            "DIVERGED"
        }
    );
    if let Err(error) = result {
        panic!("{error}");
    }
}
