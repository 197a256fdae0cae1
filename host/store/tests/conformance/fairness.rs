//! Fairness between keys: a fair lambda's key keeps at most its lookahead
//! of tasks enqueued, the rest waiting parked for the key's turn (stored
//! so when due at once, parked by the poll when they come due later), so
//! another key's task goes at the next poll whatever the backlog; every
//! claim gives the turn on, weights scale the lookahead (the lambda's, or
//! the default), and racing consumers never queue more of a key than it
//! allows.

use std::collections::BTreeMap;

use waft_core::{KeyFairness, LambdaConfig, TaskStatus};
use waft_store::{Limit, NewTask, TaskCount, TaskInsertMany, TaskStore};

use crate::support::*;

/// The lookahead the tests' fair lambda sets.
const LOOKAHEAD: u64 = 500;

fn fair(weights: &[(&str, u32)]) -> LambdaConfig {
    LambdaConfig {
        key_fairness: Some(KeyFairness {
            weights: weights.iter().map(|(k, w)| ((*k).to_owned(), *w)).collect(),
            lookahead: LOOKAHEAD as u32,
        }),
        ..config()
    }
}

fn keyed(key: &str) -> NewTask {
    NewTask {
        key: Some(key.into()),
        ..new_task("mail")
    }
}

async fn insert_keyed(store: &dyn TaskStore, key: &str, count: usize, now: i64) -> Vec<String> {
    insert_due(store, key, count, now, None).await
}

/// `count` tasks of `key`, due at `run_at` (at once when `None`).
async fn insert_due(
    store: &dyn TaskStore,
    key: &str,
    count: usize,
    now: i64,
    run_at: Option<i64>,
) -> Vec<String> {
    let mut ids = Vec::with_capacity(count);
    for start in (0..count).step_by(500) {
        let tasks = (start..count.min(start + 500))
            .map(|_| NewTask {
                run_at,
                ..keyed(key)
            })
            .collect();
        let inserted = store
            .task_insert_many(TaskInsertMany { tasks, now })
            .await
            .unwrap();
        ids.extend(inserted.into_iter().map(|t| t.id));
    }
    ids
}

/// How many of a key's tasks are in each status.
async fn counts(store: &dyn TaskStore, key: &str) -> BTreeMap<TaskStatus, u64> {
    store
        .task_count(TaskCount {
            lambda: "mail".into(),
            key: Some(key.into()),
            ..TaskCount::default()
        })
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.status, c.count))
        .collect()
}

async fn queued(store: &dyn TaskStore, key: &str) -> u64 {
    counts(store, key)
        .await
        .get(&TaskStatus::Enqueued)
        .copied()
        .unwrap_or(0)
}

/// A key's backlog beyond its lookahead waits parked for its turn (no
/// trigger, no attempt spent, said why), so another key's task scheduled
/// after it goes at the next poll; each claim gives the turn to the key's
/// oldest parked task, and a task not taking its place (cancelled) too.
pub async fn a_keys_backlog_waits_its_turn_and_another_key_goes_at_once(store: &dyn TaskStore) {
    deploy_with(store, "mail", fair(&[])).await;
    let a = insert_keyed(store, "a", 1200, T0).await;
    // Stored parked: the poll reads only the key's turn.
    let stats = store.lambda_stats(T0, T0).await.unwrap();
    let mail = stats.iter().find(|s| s.lambda == "mail").unwrap();
    assert_eq!(mail.parked, 1200, "{mail:?}");
    let first = poll(store, T0 + 10).await;
    assert_eq!(first.enqueued.len() as u64, LOOKAHEAD);
    assert_eq!(first.parked, 0);
    assert!(
        first
            .enqueued
            .iter()
            .all(|t| t.turn == Some(("a".to_owned(), 1)))
    );
    let second = poll(store, T0 + 20).await;
    assert_eq!((second.enqueued.len(), second.parked), (0, 0));
    let went: std::collections::BTreeSet<&str> =
        first.enqueued.iter().map(|t| t.id.as_str()).collect();
    let mut waiting: Vec<&String> = a.iter().filter(|id| !went.contains(id.as_str())).collect();
    waiting.sort();
    let parked = store.task_get(waiting[0]).await.unwrap().unwrap();
    assert_eq!(
        (
            parked.status,
            parked.parked,
            parked.awaits_turn,
            parked.next_trigger_at,
            parked.attempt
        ),
        (TaskStatus::New, true, true, None, 0)
    );

    // A task of another key, scheduled after the backlog, goes at once.
    let b = insert(store, keyed("b"), T0 + 30).await;
    let report = poll(store, T0 + 31).await;
    let ids: Vec<_> = report.enqueued.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, [b.as_str()]);
    assert_eq!(report.enqueued[0].turn, Some(("b".to_owned(), 1)));

    // Three claims and a cancel give the turn to four of the backlog,
    // oldest first (all due at once: by id).
    for task in &first.enqueued[..3] {
        claim(store, &task.id, task.enqueue_token, T0 + 40)
            .await
            .unwrap();
    }
    store
        .task_cancel(&first.enqueued[3].id, T0 + 40)
        .await
        .unwrap();
    let next = poll(store, T0 + 41).await;
    let mut ids: Vec<&String> = next.enqueued.iter().map(|t| &t.id).collect();
    ids.sort();
    let expected = &waiting[..4];
    assert_eq!(ids, expected);
    assert_eq!(queued(store, "a").await, LOOKAHEAD);
    let woken = store.task_get(expected[0]).await.unwrap().unwrap();
    assert!(!woken.parked && !woken.awaits_turn);

    // Tasks due later are parked by the poll when they come due, counted
    // in the limit's metric.
    insert_due(store, "d", 600, T0 + 50, Some(T0 + 100)).await;
    let report = poll(store, T0 + 100).await;
    assert_eq!(
        (report.enqueued.len() as u64, report.parked),
        (LOOKAHEAD, 100)
    );
    assert_eq!(
        report.limited,
        [(("mail".to_owned(), Limit::KeyFairness), 100)].into()
    );
    let d = store
        .task_list(waft_store::TaskList {
            lambda: Some("mail".into()),
            key: Some("d".into()),
            limit: 1000,
            ..waft_store::TaskList::default()
        })
        .await
        .unwrap();
    assert!(d.iter().filter(|t| t.parked).all(|t| t.awaits_turn));
}

/// A key's weight scales its lookahead and its turns in the queue, whatever
/// characters the key holds; with a concurrency per key too, the tighter
/// limit holds.
pub async fn weights_scale_a_keys_lookahead(store: &dyn TaskStore) {
    deploy_with(store, "mail", fair(&[("gold", 2)])).await;
    insert_keyed(store, "gold", 1100, T0).await;
    insert_keyed(store, "lead", 600, T0 + 1).await;
    for step in 0..3 {
        poll(store, T0 + 10 + step).await;
    }
    assert_eq!(queued(store, "gold").await, 2 * LOOKAHEAD);
    assert_eq!(queued(store, "lead").await, LOOKAHEAD);

    deploy_with(
        store,
        "mail",
        LambdaConfig {
            key_concurrency: Some(3),
            ..fair(&[])
        },
    )
    .await;
    let c = insert_due(store, "c", 5, T0 + 20, Some(T0 + 25)).await;
    let report = poll(store, T0 + 30).await;
    let of_c = report
        .enqueued
        .iter()
        .filter(|t| t.turn.as_ref().is_some_and(|(key, _)| key == "c"))
        .count();
    assert_eq!(of_c, 3);
    let mut parked = 0;
    for id in &c {
        let task = store.task_get(id).await.unwrap().unwrap();
        // The concurrency, not the turn, held it back.
        assert!(!task.awaits_turn, "{task:?}");
        parked += usize::from(task.parked);
    }
    assert_eq!(parked, 2);

    // A weight names its key as given, whatever the store keeps of it.
    deploy_with(store, "mail", fair(&[("g\\o\0ld", 3)])).await;
    insert_keyed(store, "g\\o\0ld", 1, T0 + 40).await;
    let report = poll(store, T0 + 50).await;
    let weights: Vec<u32> = report
        .enqueued
        .iter()
        .filter_map(|t| t.turn.as_ref().map(|(_, weight)| *weight))
        .collect();
    assert!(weights.contains(&3), "{weights:?}");
}

/// A lambda's lookahead is what each of its keys keeps queued, the default
/// when it sets none; deployed larger, the next poll gives a key's parked
/// tasks the places it adds; deployed smaller, tasks already queued stay.
pub async fn a_lambdas_lookahead_is_what_a_key_keeps_queued(store: &dyn TaskStore) {
    deploy_with(
        store,
        "mail",
        LambdaConfig {
            key_fairness: Some(KeyFairness::default()),
            ..config()
        },
    )
    .await;
    let mail = store.lambda_get("mail").await.unwrap().unwrap();
    let default = KeyFairness::DEFAULT_LOOKAHEAD;
    assert_eq!(mail.config.key_fairness.unwrap().lookahead, default);
    insert_keyed(store, "a", 300, T0).await;
    poll(store, T0 + 10).await;
    assert_eq!(queued(store, "a").await, u64::from(default));

    let small = KeyFairness {
        weights: [("gold".to_owned(), 2)].into(),
        lookahead: 7,
    };
    deploy_with(
        store,
        "mail",
        LambdaConfig {
            key_fairness: Some(small.clone()),
            ..config()
        },
    )
    .await;
    let mail = store.lambda_get("mail").await.unwrap().unwrap();
    assert_eq!(mail.config.key_fairness, Some(small));
    insert_keyed(store, "gold", 30, T0 + 20).await;
    insert_keyed(store, "lead", 30, T0 + 20).await;
    poll(store, T0 + 30).await;
    assert_eq!(queued(store, "gold").await, 14);
    assert_eq!(queued(store, "lead").await, 7);
    assert_eq!(queued(store, "a").await, u64::from(default));

    deploy_with(
        store,
        "mail",
        LambdaConfig {
            key_fairness: Some(KeyFairness {
                lookahead: 250,
                ..KeyFairness::default()
            }),
            ..config()
        },
    )
    .await;
    poll(store, T0 + 40).await;
    assert_eq!(queued(store, "a").await, 250);
    assert_eq!(queued(store, "lead").await, 30);
}

/// With a quota too, a key's tasks given later slots count in its turn: a
/// backlog is not paced into slots ahead of every other key's task.
pub async fn a_quota_does_not_let_a_backlog_out_of_its_turn(store: &dyn TaskStore) {
    deploy_with(
        store,
        "mail",
        LambdaConfig {
            quota_per_sec: Some(10.0),
            ..fair(&[])
        },
    )
    .await;
    insert_keyed(store, "a", 1200, T0).await;
    for step in 0..5 {
        poll(store, T0 + 10 + step).await;
    }
    let stats = store.lambda_stats(T0 + 20, T0).await.unwrap();
    let mail = stats.iter().find(|s| s.lambda == "mail").unwrap();
    assert_eq!(1200 - mail.parked, LOOKAHEAD, "{mail:?}");
    // The quota's burst went; the rest wait for their slots.
    assert!((10..=11).contains(&queued(store, "a").await));
}

/// A redeploy without fairness lets every parked task go at the next poll,
/// first come, first served again.
pub async fn a_redeploy_without_fairness_lets_the_backlog_go(store: &dyn TaskStore) {
    deploy_with(store, "mail", fair(&[])).await;
    insert_keyed(store, "a", 600, T0).await;
    let report = poll(store, T0 + 10).await;
    assert_eq!(report.enqueued.len() as u64, LOOKAHEAD);
    deploy_with(store, "mail", config()).await;
    let report = poll(store, T0 + 20).await;
    assert_eq!(report.enqueued.len(), 100);
    assert!(report.enqueued.iter().all(|t| t.turn.is_none()));
    assert_eq!(queued(store, "a").await, 600);
}

/// Consumers polling at once, claims among them, never queue more of a key
/// than its lookahead; every task ends.
pub async fn racing_consumers_never_queue_past_a_keys_turn(store: &dyn TaskStore) {
    const TASKS: usize = 1400;
    deploy_with(store, "mail", fair(&[])).await;
    insert_keyed(store, "a", TASKS, T0).await;
    insert_keyed(store, "b", 100, T0).await;
    let worker = |seed: u64| async move {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut now = T0;
        for _ in 0..12 {
            now += 1 + rng.i64(0..3);
            let report = store
                .task_enqueue_ready(waft_store::TaskEnqueueReady {
                    now,
                    limit: 1 + rng.u32(0..400),
                    enqueue_timeout: ENQUEUE_TIMEOUT,
                })
                .await
                .unwrap();
            for task in report.enqueued.iter().filter(|_| rng.bool()) {
                if let Ok(claimed) = claim(store, &task.id, task.enqueue_token, now).await {
                    let _ = finish(store, &task.id, claimed.lease_token, success(), now).await;
                }
            }
            let queued = queued(store, "a").await;
            assert!(queued <= LOOKAHEAD, "{queued} of key a queued");
        }
    };
    futures::future::join_all((0..4).map(worker)).await;
    // One consumer drains the rest, past every enqueue timeout.
    for step in 0..40 {
        let now = T0 + 10_000_000 * (step + 1);
        for task in poll(store, now).await.enqueued {
            let claimed = claim(store, &task.id, task.enqueue_token, now)
                .await
                .unwrap();
            finish(store, &task.id, claimed.lease_token, success(), now)
                .await
                .unwrap();
        }
    }
    for (key, count) in [("a", TASKS as u64), ("b", 100)] {
        let counts = counts(store, key).await;
        assert_eq!(
            counts.get(&TaskStatus::Success).copied(),
            Some(count),
            "{key}: {counts:?}"
        );
    }
}
