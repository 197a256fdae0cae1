//! The execution that ends a task for good is kept by the task's own row,
//! not a row of `attempts` (see `src/sql/attempt.rs`): read back, it is
//! whole, after the attempts before it, as every other one is.

use waft_core::LambdaConfig;
use waft_store::{Attempt, AttemptOutcome, ResultOutcome, TaskStore};

use crate::support::{
    T0, config, deploy_with, finish, insert, new_task, retriable, start, success,
};

/// A success after a retry, and a fatal failure: each attempt with its
/// outcome, error, log, times and lease.
pub async fn a_final_execution_reads_back_whole(store: &dyn TaskStore) {
    let once_more = LambdaConfig {
        max_attempts: 3,
        ..config()
    };
    deploy_with(store, "final", once_more).await;

    let done = insert(store, new_task("final"), T0).await;
    let first = start(store, &done, T0).await;
    finish(store, &done, first, retriable("busy"), T0 + 3)
        .await
        .unwrap();
    // Past any backoff.
    let later = T0 + 3_600_000;
    let second = start(store, &done, later).await;
    finish(store, &done, second, success(), later + 5)
        .await
        .unwrap();
    let attempts = store.attempt_list(&done).await.unwrap();
    assert_eq!(
        attempts,
        [
            attempt(
                1,
                first,
                AttemptOutcome::Retriable,
                Some("busy"),
                T0,
                T0 + 3
            ),
            attempt(2, second, AttemptOutcome::Success, None, later, later + 5),
        ]
    );

    let broken = insert(store, new_task("final"), later + 20).await;
    let lease = start(store, &broken, later + 20).await;
    let fatal = ResultOutcome::Fatal {
        error: "bad input\u{0}\u{1f980}".into(),
    };
    finish(store, &broken, lease, fatal, later + 21)
        .await
        .unwrap();
    let attempts = store.attempt_list(&broken).await.unwrap();
    assert_eq!(
        attempts,
        [attempt(
            1,
            lease,
            AttemptOutcome::Fatal,
            Some("bad input\u{0}\u{1f980}"),
            later + 20,
            later + 21
        )]
    );
}

/// An attempt as `support::finish` ends it (its log names its lease).
fn attempt(
    attempt: u32,
    lease_token: i64,
    outcome: AttemptOutcome,
    error: Option<&str>,
    started_at: i64,
    ended_at: i64,
) -> Attempt {
    Attempt {
        attempt,
        lease_token,
        outcome,
        error: error.map(str::to_owned),
        log: Some(format!("the log of lease {lease_token}")),
        started_at: Some(started_at),
        ended_at,
        replayed: 0,
    }
}
