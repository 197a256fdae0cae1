//! Consumers: quota pacing, and concurrent consumers and claimers.

use waft_core::{LambdaConfig, TaskStatus};
use waft_store::{Refusal, TaskClaimMany, TaskEnqueueReady, TaskInsertMany, TaskStore};

use crate::support::*;

/// Deploys `paced`, with a quota of 10 tasks a second.
async fn deploy_paced(store: &dyn TaskStore) {
    let config = LambdaConfig {
        quota_per_sec: Some(10.0),
        ..config()
    };
    deploy_with(store, "paced", config).await;
}

/// A lambda with a quota of 10 tasks/s: a backlog of 50 due at once is
/// enqueued a second's worth at a time, each of the rest at its own slot;
/// a task scheduled later queues behind the backlog; a lambda without a
/// quota is not held back.
pub async fn a_quota_paces_a_backlog_and_spares_other_lambdas(store: &dyn TaskStore) {
    deploy_paced(store).await;
    deploy(store, "free").await;
    let tasks = (0..50)
        .map(|_| new_task("paced"))
        .chain((0..20).map(|_| new_task("free")))
        .collect();
    store
        .task_insert_many(TaskInsertMany { tasks, now: T0 })
        .await
        .unwrap();
    let count = |report: &waft_store::EnqueueReport, lambda: &str| {
        report
            .enqueued
            .iter()
            .filter(|t| t.lambda == lambda)
            .count()
    };

    let first = poll(store, T0).await;
    assert_eq!((count(&first, "paced"), count(&first, "free")), (10, 20));
    assert_eq!(first.paced, 40);
    assert!(poll(store, T0 - 1).await.enqueued.is_empty());

    let late = insert(store, new_task("paced"), T0 + 1000).await;
    // Slots T0 ..= T0 + 1 s: eleven of the backlog; the late task waits.
    let second = poll(store, T0 + 1000).await;
    assert_eq!(count(&second, "paced"), 11);
    assert!(second.enqueued.iter().all(|t| t.id != late));
    assert_eq!(second.paced, 1);

    let rest = poll(store, T0 + 3900).await;
    assert_eq!(
        count(&rest, "paced"),
        29,
        "the backlog's last slot is T0 + 3.9 s"
    );
    let last = poll(store, T0 + 4000).await;
    assert_eq!(last.enqueued.len(), 1);
    assert_eq!(last.enqueued[0].id, late);
}

/// Two consumers polling at once share the lambda's pace: together they
/// enqueue no more than one consumer would.
pub async fn concurrent_consumers_share_one_pace(store: &dyn TaskStore) {
    deploy_paced(store).await;
    let tasks = (0..100).map(|_| new_task("paced")).collect();
    store
        .task_insert_many(TaskInsertMany { tasks, now: T0 })
        .await
        .unwrap();
    let polls = (0..4).map(|_| {
        store.task_enqueue_ready(TaskEnqueueReady {
            now: T0,
            limit: 25,
            enqueue_timeout: ENQUEUE_TIMEOUT,
        })
    });
    let enqueued: usize = futures::future::join_all(polls)
        .await
        .into_iter()
        .map(|report| report.unwrap().enqueued.len())
        .sum();
    // A second's worth, or one more when a later poll already finds the
    // task whose slot is exactly T0.
    assert!((10..=11).contains(&enqueued), "{enqueued}");
    // Slots T0 - 1 s ..= T0 + 1 s, 100 ms apart: 21 by then, however many
    // consumers polled.
    let by_then = enqueued + poll(store, T0 + 1000).await.enqueued.len();
    assert_eq!(by_then, 21);
}

/// Several consumers poll at once and several claimers race for every
/// message: each task is enqueued by exactly one poll and claimed exactly
/// once.
pub async fn concurrent_consumers_and_claimers_never_double_up(store: &dyn TaskStore) {
    const TASKS: usize = 300;
    deploy(store, "mail").await;
    let tasks = (0..TASKS).map(|_| new_task("mail")).collect();
    store
        .task_insert_many(TaskInsertMany { tasks, now: T0 })
        .await
        .unwrap();

    let polls = (0..4).map(|_| async {
        let mut mine = Vec::new();
        loop {
            let report = store
                .task_enqueue_ready(TaskEnqueueReady {
                    now: T0,
                    limit: 16,
                    enqueue_timeout: ENQUEUE_TIMEOUT,
                })
                .await
                .unwrap();
            if report.enqueued.is_empty() {
                return mine;
            }
            mine.extend(report.enqueued);
        }
    });
    let enqueued: Vec<_> = futures::future::join_all(polls)
        .await
        .into_iter()
        .flatten()
        .collect();
    let mut ids: Vec<&str> = enqueued.iter().map(|t| t.id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(
        (enqueued.len(), ids.len()),
        (TASKS, TASKS),
        "each task enqueued exactly once"
    );

    let claims: Vec<(String, i64)> = enqueued
        .iter()
        .map(|t| (t.id.clone(), t.enqueue_token))
        .collect();
    let claimers = (0..8).map(|i| {
        let mut claims = claims.clone();
        // Each claimer walks the messages in its own order.
        claims.rotate_left(i * TASKS / 8);
        async move {
            let mut won = Vec::new();
            for chunk in claims.chunks(25) {
                let answers = store
                    .task_claim_many(TaskClaimMany {
                        claims: chunk.to_vec(),
                        now: T0,
                        claim_timeout: CLAIM_TIMEOUT,
                    })
                    .await
                    .unwrap();
                for ((id, _), answer) in chunk.iter().zip(answers) {
                    match answer {
                        Ok(claimed) => won.push((id.clone(), claimed.lease_token)),
                        Err(refusal) => {
                            assert_eq!(refusal, Refusal::WrongState(TaskStatus::Claimed))
                        }
                    }
                }
            }
            won
        }
    });
    let mut won: Vec<(String, i64)> = futures::future::join_all(claimers)
        .await
        .into_iter()
        .flatten()
        .collect();
    won.sort();
    let before = won.len();
    won.dedup_by(|a, b| a.0 == b.0);
    assert_eq!(
        (before, won.len()),
        (TASKS, TASKS),
        "each task claimed exactly once"
    );
}
