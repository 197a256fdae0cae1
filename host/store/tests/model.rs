//! The model-based test of the store: random sequences of every
//! `TaskStore` operation of the state table — insert (keyed under limits of
//! concurrency and rate per key and fairness between keys, or debounced),
//! poll at advancing
//! times (every timeout expiring), claim with current and stale tokens,
//! heartbeat, journal writes under current and stale leases (and holes),
//! results of every kind with or without a journal write, cancel, gates by
//! lambda and collection, redrive keeping or discarding journals, deploys,
//! periodic occurrences — run against each backend and against the
//! reference model (`model/reference.rs`), compared after every step
//! (journals entry by entry), with the state table's invariants checked on
//! the backend's own state.
//!
//! On Postgres a step may also be a race: two or three operations run at
//! once on separate connections, and the backend's answers and state must
//! equal those of one of their serial orders (they are linearizable). Polls
//! racing each other may split the due tasks between them (`SKIP LOCKED`,
//! as several consumers do); they are matched as one poll doing the work of
//! all.
//!
//! `WAFT_MODEL_CASES` (default 48) sequences per backend, each of up to
//! `WAFT_MODEL_STEPS` (default 40) steps; `WAFT_MODEL_SEED` replays a run.
//! Each prints its operation count, for the long runs in docs/reliability.md.
//!
//! The parts, in `model/`: `ops.rs` the generated operations and their
//! strategies, `run.rs` the `Run` that drives a backend beside the model,
//! `compare.rs` what is compared after each step, `race.rs` the races and
//! their serial orders, `reference.rs` the model itself (its operations by
//! who makes them in `reference/`); this file holds the test entry points,
//! one per backend, and what sizes and seeds a run.

#[path = "model/compare.rs"]
mod compare;
#[path = "model/ops.rs"]
mod ops;
#[path = "model/race.rs"]
mod race;
#[path = "model/reference.rs"]
mod reference;
#[path = "model/run.rs"]
mod run;

use std::sync::atomic::{AtomicU64, Ordering};

use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use sqlx::{Connection as _, Executor as _};
use waft_store::{PostgresStore, SqliteStore, TaskStore};

use ops::steps;
use run::run_sequence;

/// Operations run by the current test, for the count it prints.
static OPERATIONS: AtomicU64 = AtomicU64::new(0);
/// Tasks its polls parked (a key's places all taken), printed too: the
/// limits per key are exercised, not only allowed.
static PARKED: AtomicU64 = AtomicU64::new(0);
/// Tasks the model parked for their key's turn (at insert, or by a poll),
/// printed too: fairness is exercised, not only allowed.
static TURNS: AtomicU64 = AtomicU64::new(0);
/// Tasks its polls made wait for a slot of their key's rate, printed too.
static KEY_PACED: AtomicU64 = AtomicU64::new(0);
/// Debounced inserts that collapsed into their key's waiting task, printed
/// too, for the same reason.
static COLLAPSED: AtomicU64 = AtomicU64::new(0);

fn config() -> Config {
    let cases = std::env::var("WAFT_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48);
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

fn max_steps() -> usize {
    std::env::var("WAFT_MODEL_STEPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40)
}

fn runner() -> TestRunner {
    match std::env::var("WAFT_MODEL_SEED") {
        Ok(seed) => {
            let seed: u64 = seed.parse().expect("WAFT_MODEL_SEED is a number");
            let mut bytes = [0u8; 32];
            bytes[..8].copy_from_slice(&seed.to_le_bytes());
            TestRunner::new_with_rng(config(), TestRng::from_seed(RngAlgorithm::ChaCha, &bytes))
        }
        Err(_) => TestRunner::new(config()),
    }
}

/// Drives `runner` with fresh stores from `fresh`.
fn drive<S, F, Fut>(name: &str, races: bool, fresh: F)
where
    S: TaskStore + 'static,
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = (S, Box<dyn std::any::Any>)>,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    OPERATIONS.store(0, Ordering::Relaxed);
    PARKED.store(0, Ordering::Relaxed);
    TURNS.store(0, Ordering::Relaxed);
    COLLAPSED.store(0, Ordering::Relaxed);
    KEY_PACED.store(0, Ordering::Relaxed);
    let result = runner().run(&steps(races, max_steps()), |steps| {
        runtime.block_on(async {
            let (store, _guard) = fresh().await;
            run_sequence(&store, &steps).await;
        });
        Ok(())
    });
    println!(
        "{name}: {} operations ({} tasks parked by polls, {} parked for their key's turn in \
         the model, {} paced by their key's rate, {} debounced inserts collapsed) in {:.1?}, {}",
        OPERATIONS.load(Ordering::Relaxed),
        PARKED.load(Ordering::Relaxed),
        TURNS.load(Ordering::Relaxed),
        KEY_PACED.load(Ordering::Relaxed),
        COLLAPSED.load(Ordering::Relaxed),
        started.elapsed(),
        match &result {
            Ok(()) => "0 divergences".to_owned(),
            Err(proptest::test_runner::TestError::Abort(why)) => format!("aborted: {why}"),
            Err(proptest::test_runner::TestError::Fail(..)) => "DIVERGED".to_owned(),
        }
    );
    if let Err(error) = result {
        panic!("{error}");
    }
}

#[test]
fn sqlite_follows_the_model() {
    drive("sqlite", false, || async {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("waft.db"))
            .await
            .unwrap();
        (store, Box::new(dir) as Box<dyn std::any::Any>)
    });
}

#[test]
fn postgres_follows_the_model_and_races_linearize() {
    let Some(server) = waft_testing::postgres() else {
        return;
    };
    // One database, emptied before each sequence: creating one per
    // sequence took most of a long run's time. Its store is connected on
    // the runtime the sequences run on (a pool's connections belong to the
    // runtime that made them), the first time one needs it.
    let url = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(server.fresh_database());
    let store = std::sync::Arc::new(tokio::sync::OnceCell::new());
    drive("postgres", true, || {
        let (store, url) = (store.clone(), url.clone());
        async move {
            let store = store
                .get_or_init(|| async { PostgresStore::connect(&url, 8).await.unwrap() })
                .await
                .clone();
            let mut admin = sqlx::PgConnection::connect(&url).await.unwrap();
            admin
                .execute(
                    "TRUNCATE artifacts, components, lambdas, lambda_versions, lambda_pace, \
                     key_pace, key_landings, tasks, attempts, journal, journal_staged, signals, \
                     awaits, gates, crons, tokens, secrets",
                )
                .await
                .unwrap();
            let _ = admin.close().await;
            (store, Box::new(()) as Box<dyn std::any::Any>)
        }
    });
}
