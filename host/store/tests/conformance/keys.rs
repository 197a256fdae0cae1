//! Limits per key: a lambda's concurrency per key holds across the poll's
//! every path (a landing by success, retry or cancel; a redeploy), and with
//! consumers, controllers and executors racing.

use std::collections::BTreeMap;

use waft_core::{LambdaConfig, TaskStatus};
use waft_store::{GateSet, GateState, NewTask, StatusCount, TaskCount, TaskStore};

use crate::support::*;

fn limited(limit: Option<u32>) -> LambdaConfig {
    LambdaConfig {
        key_concurrency: limit,
        ..config()
    }
}

fn keyed(key: &str) -> NewTask {
    NewTask {
        key: Some(key.into()),
        ..new_task("mail")
    }
}

/// The ids a poll enqueued.
async fn enqueued(store: &dyn TaskStore, now: i64) -> Vec<(String, i64)> {
    let mut ids: Vec<_> = poll(store, now)
        .await
        .enqueued
        .into_iter()
        .map(|t| (t.id, t.enqueue_token))
        .collect();
    ids.sort();
    ids
}

/// Claims an enqueued task at `now` and ends it in success a moment later:
/// it lands.
async fn land(store: &dyn TaskStore, id: &str, token: i64, now: i64) {
    let lease = claim(store, id, token, now).await.unwrap().lease_token;
    finish(store, id, lease, success(), now + 1).await.unwrap();
}

/// A key's tasks in flight never outnumber its lambda's limit; the others
/// wait parked (new, no trigger, no attempt spent) and go oldest first as
/// each task of their key lands, whether it succeeds, fails to retry, or is
/// cancelled; other keys and tasks without a key are not held back.
pub async fn a_keys_tasks_in_flight_stay_within_its_limit(store: &dyn TaskStore) {
    deploy_with(store, "mail", limited(Some(2))).await;
    let mut acme = Vec::new();
    for i in 0..5 {
        acme.push(insert(store, keyed("acme"), T0 + i).await);
    }
    let globex = insert(store, keyed("globex"), T0).await;
    let plain = insert(store, new_task("mail"), T0).await;

    let report = poll(store, T0 + 10).await;
    assert_eq!(report.parked, 3);
    assert_eq!(
        report.limited,
        [(("mail".to_owned(), waft_store::Limit::KeyConcurrency), 3)].into()
    );
    let mut first: Vec<&str> = report.enqueued.iter().map(|t| t.id.as_str()).collect();
    first.sort_unstable();
    let mut expected = vec![
        acme[0].as_str(),
        acme[1].as_str(),
        globex.as_str(),
        plain.as_str(),
    ];
    expected.sort_unstable();
    assert_eq!(first, expected);
    for id in &acme[2..] {
        let task = store.task_get(id).await.unwrap().unwrap();
        assert_eq!(
            (task.status, task.parked, task.next_trigger_at, task.attempt),
            (TaskStatus::New, true, None, 0)
        );
    }
    // Nothing lands, nothing goes: the parked tasks cost the poll nothing.
    assert!(enqueued(store, T0 + 20).await.is_empty());
    // The overview counts them apart from the ready tasks.
    let stats = store.lambda_stats(T0 + 20, T0).await.unwrap();
    let mail = stats.iter().find(|s| s.lambda == "mail").unwrap();
    assert_eq!(
        (mail.parked, mail.waiting, mail.held),
        (3, 0, 0),
        "{mail:?}"
    );
    let ready: u64 = mail.ready.iter().map(|d| d.count).sum();
    assert_eq!(ready, 4, "the four enqueued: {mail:?}");

    // The first lands by success: the oldest parked goes.
    let token = |report: &waft_store::EnqueueReport, id: &str| {
        report
            .enqueued
            .iter()
            .find(|t| t.id == id)
            .unwrap()
            .enqueue_token
    };
    let lease = claim(store, &acme[0], token(&report, &acme[0]), T0 + 30)
        .await
        .unwrap()
        .lease_token;
    assert_eq!(
        finish(store, &acme[0], lease, success(), T0 + 31).await,
        Ok(TaskStatus::Success)
    );
    let next = enqueued(store, T0 + 32).await;
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].0, acme[2]);
    assert!(!store.task_get(&acme[2]).await.unwrap().unwrap().parked);

    // The second lands by a retry: the next parked goes; the retried task,
    // due again after its backoff, finds the key full and is parked.
    let lease = claim(store, &acme[1], token(&report, &acme[1]), T0 + 40)
        .await
        .unwrap()
        .lease_token;
    assert_eq!(
        finish(store, &acme[1], lease, retriable("busy"), T0 + 41).await,
        Ok(TaskStatus::RetriableFailure)
    );
    let next = enqueued(store, T0 + 42).await;
    assert_eq!(next.iter().map(|t| &t.0).collect::<Vec<_>>(), [&acme[3]]);
    let later = poll(store, T0 + 60_000).await;
    assert!(later.enqueued.is_empty());
    assert_eq!(later.parked, 1);
    let retried = store.task_get(&acme[1]).await.unwrap().unwrap();
    assert_eq!(
        (retried.status, retried.parked, retried.attempt),
        (TaskStatus::RetriableFailure, true, 1)
    );

    // A cancel of a task in flight lands it too; a parked one can be
    // cancelled as well, and is no longer waited for.
    store.task_cancel(&acme[4], T0 + 60_001).await.unwrap();
    store.task_cancel(&acme[2], T0 + 60_002).await.unwrap();
    let next = enqueued(store, T0 + 60_003).await;
    assert_eq!(next.iter().map(|t| &t.0).collect::<Vec<_>>(), [&acme[1]]);
    assert_eq!(in_flight(store, "acme").await, 2);
}

/// How many of `mail`'s tasks of `key` are in flight, as one count (one
/// statement: a consistent state).
async fn in_flight(store: &dyn TaskStore, key: &str) -> u64 {
    let counts = store
        .task_count(TaskCount {
            lambda: "mail".into(),
            key: Some(key.into()),
            ..TaskCount::default()
        })
        .await
        .unwrap();
    counts
        .iter()
        .filter(|c| waft_core::machine::IN_FLIGHT.contains(c.status))
        .map(|c| c.count)
        .sum()
}

/// A redeploy with a larger limit, or none, lets go as many parked tasks
/// as it now allows, without waiting for a landing.
pub async fn a_redeploy_lets_parked_tasks_go(store: &dyn TaskStore) {
    deploy_with(store, "mail", limited(Some(1))).await;
    for i in 0..4 {
        insert(store, keyed("acme"), T0 + i).await;
    }
    assert_eq!(poll(store, T0 + 10).await.parked, 3);
    deploy_with(store, "mail", limited(Some(3))).await;
    assert_eq!(enqueued(store, T0 + 20).await.len(), 2);
    deploy_with(store, "mail", limited(None)).await;
    assert_eq!(enqueued(store, T0 + 30).await.len(), 1);
    let waiting = store
        .task_count(TaskCount {
            lambda: "mail".into(),
            key: Some("acme".into()),
            ..TaskCount::default()
        })
        .await
        .unwrap();
    assert_eq!(
        waiting,
        vec![StatusCount {
            status: TaskStatus::Enqueued,
            count: 4
        }]
    );

    // A rollback to a version without the limit lets them go too.
    deploy_with(store, "mail", limited(Some(1))).await;
    for i in 0..3 {
        insert(store, keyed("globex"), T0 + 40 + i).await;
    }
    assert_eq!(poll(store, T0 + 50).await.parked, 2);
    store
        .lambda_rollback(waft_store::LambdaRollback {
            name: "mail".into(),
            to: Some(3),
            now: T0 + 60,
        })
        .await
        .unwrap();
    assert_eq!(enqueued(store, T0 + 70).await.len(), 2);
}

/// A limit deployed while a key's tasks are in flight counts them: the
/// key's next task waits for their landings (each marks the key, as a
/// limited lambda's landing does); a redeploy without the limit lets go
/// what waits, and stops counting.
pub async fn a_limit_deployed_later_counts_the_tasks_in_flight(store: &dyn TaskStore) {
    deploy_with(store, "mail", limited(None)).await;
    for i in 0..3 {
        insert(store, keyed("acme"), T0 + i).await;
    }
    let flying = enqueued(store, T0 + 10).await;
    assert_eq!(flying.len(), 3);
    deploy_with(store, "mail", limited(Some(2))).await;
    let next = insert(store, keyed("acme"), T0 + 20).await;
    let report = poll(store, T0 + 30).await;
    assert_eq!(
        (report.enqueued.len(), report.parked),
        (0, 1),
        "3 in flight against a limit of 2"
    );
    for (step, (id, token)) in flying.iter().take(2).enumerate() {
        let now = T0 + 40 + 10 * step as i64;
        land(store, id, *token, now).await;
        let went = enqueued(store, now + 2).await;
        // The first landing leaves 2 in flight; the second frees a place.
        let expected: &[String] = if step == 0 {
            &[]
        } else {
            std::slice::from_ref(&next)
        };
        assert_eq!(
            went.iter().map(|t| t.0.clone()).collect::<Vec<_>>(),
            expected
        );
    }
    // Without the limit again, the key's tasks are not counted: another
    // goes at once beside the two in flight, and a third limit counts
    // them again.
    deploy_with(store, "mail", limited(None)).await;
    insert(store, keyed("acme"), T0 + 100).await;
    assert_eq!(enqueued(store, T0 + 110).await.len(), 1);
    deploy_with(store, "mail", limited(Some(3))).await;
    insert(store, keyed("acme"), T0 + 120).await;
    assert_eq!(poll(store, T0 + 130).await.parked, 1);
}

/// A first limit deployed while a consumer polls (no lambda had one, so
/// the poll decides by none): whether the poll comes wholly before the
/// deploy or wholly after it, what it enqueued counts against the limit,
/// and the key's next task is parked while the limit is full.
pub async fn a_first_limit_deployed_during_a_poll_counts_what_it_enqueues(store: &dyn TaskStore) {
    for round in 0..20 {
        let key = format!("round-{round}");
        let now = T0 + 1_000 * round;
        deploy_with(store, "mail", limited(None)).await;
        let tasks = (0..50).map(|_| keyed(&key)).collect();
        store
            .task_insert_many(waft_store::TaskInsertMany { tasks, now })
            .await
            .unwrap();
        let (first, ()) = futures::join!(
            poll(store, now + 1),
            deploy_with(store, "mail", limited(Some(2)))
        );
        let next = insert(store, keyed(&key), now + 2).await;
        let report = poll(store, now + 3).await;
        assert!(
            report.enqueued.iter().all(|t| t.id != next),
            "round {round}: the key's next task went past a full limit ({} enqueued before)",
            first.enqueued.len()
        );
    }
}

/// Consumers, controllers and executors racing over keys with a limit of
/// 2: no committed state ever has more than 2 of a key in flight, and
/// every task ends.
pub async fn racing_consumers_never_pass_a_keys_limit(store: &dyn TaskStore) {
    const LIMIT: u64 = 2;
    const KEYS: [&str; 3] = ["a", "b", "c"];
    deploy_with(store, "mail", limited(Some(LIMIT as u32))).await;
    let tasks = (0..30)
        .map(|i| keyed(KEYS[i % KEYS.len()]))
        .collect::<Vec<_>>();
    store
        .task_insert_many(waft_store::TaskInsertMany { tasks, now: T0 })
        .await
        .unwrap();
    let worker = |seed: u64| async move {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut now = T0;
        for _ in 0..60 {
            now += 1 + rng.i64(0..3);
            let report = store
                .task_enqueue_ready(waft_store::TaskEnqueueReady {
                    now,
                    limit: 1 + rng.u32(0..4),
                    enqueue_timeout: ENQUEUE_TIMEOUT,
                })
                .await
                .unwrap();
            for task in report.enqueued {
                let Ok(claimed) = claim(store, &task.id, task.enqueue_token, now).await else {
                    continue;
                };
                let outcome = if rng.bool() {
                    success()
                } else {
                    retriable("again")
                };
                let _ = finish(store, &task.id, claimed.lease_token, outcome, now).await;
            }
            for key in KEYS {
                let flying = in_flight(store, key).await;
                assert!(flying <= LIMIT, "key {key}: {flying} in flight");
            }
        }
    };
    futures::future::join_all((0..6).map(worker)).await;
    // Then one consumer drains what is left, far in the future (backoffs
    // run out): every task ends.
    for step in 0..200 {
        let now = T0 + 10_000_000 * (step + 1);
        let report = poll(store, now).await;
        for task in report.enqueued {
            let claimed = claim(store, &task.id, task.enqueue_token, now)
                .await
                .unwrap();
            finish(store, &task.id, claimed.lease_token, success(), now)
                .await
                .unwrap();
        }
    }
    let counts: BTreeMap<TaskStatus, u64> = store
        .task_count(TaskCount {
            lambda: "mail".into(),
            ..TaskCount::default()
        })
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.status, c.count))
        .collect();
    let ended: u64 = counts
        .iter()
        .filter(|(status, _)| waft_core::machine::ENDED.contains(**status))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(ended, 30, "{counts:?}");
}

/// A parked task woken for a place it then does not take (a drop gate ends
/// it, a paused one holds it) leaves the place to the next parked task of
/// its key at the next poll: no key keeps a parked task beside a free place.
pub async fn a_woken_task_that_does_not_go_leaves_its_place(store: &dyn TaskStore) {
    deploy_with(store, "mail", limited(Some(1))).await;
    let in_collection = |collection: &str| NewTask {
        collection: Some(collection.into()),
        ..keyed("acme")
    };
    let first = insert(store, in_collection("default"), T0).await;
    let dropped = insert(store, in_collection("dropped"), T0 + 1).await;
    let held = insert(store, in_collection("held"), T0 + 2).await;
    let last = insert(store, in_collection("default"), T0 + 3).await;
    let report = poll(store, T0 + 10).await;
    assert_eq!(report.parked, 3);
    for (collection, state) in [("dropped", GateState::Dropped), ("held", GateState::Paused)] {
        store
            .gate_set(GateSet {
                lambda: "mail".into(),
                collection: Some(collection.into()),
                state,
                now: T0 + 11,
            })
            .await
            .unwrap();
    }
    land(store, &first, report.enqueued[0].enqueue_token, T0 + 20).await;
    // The oldest parked is woken and dropped; then the next, held; then the
    // last goes.
    let mut went = Vec::new();
    for step in 0..4 {
        went.extend(
            enqueued(store, T0 + 30 + step)
                .await
                .into_iter()
                .map(|t| t.0),
        );
    }
    assert_eq!(went, std::slice::from_ref(&last));
    assert_eq!(status(store, &dropped).await, TaskStatus::Dropped);
    let held = store.task_get(&held).await.unwrap().unwrap();
    assert!(held.held && !held.parked, "{held:?}");
}

/// A task given its key's place by a poll that then paces it (its key's
/// rate has no token) leaves that place when it is cancelled while it
/// waits for its slot: the task the poll parked for it goes at the next
/// poll.
pub async fn a_paced_task_that_leaves_gives_back_its_place(store: &dyn TaskStore) {
    deploy_with(
        store,
        "mail",
        LambdaConfig {
            key_rate: Some(waft_core::KeyRate {
                count: 1,
                period: std::time::Duration::from_secs(3600),
            }),
            ..limited(Some(1))
        },
    )
    .await;
    // The key's one token goes to a first task, which lands.
    let first = insert(store, keyed("acme"), T0).await;
    let (id, token) = enqueued(store, T0 + 1).await.remove(0);
    assert_eq!(id, first);
    land(store, &first, token, T0 + 2).await;
    assert!(enqueued(store, T0 + 4).await.is_empty());
    // The next two: one takes the place and waits for a token, one parks.
    let paced = insert(store, keyed("acme"), T0 + 10).await;
    let parked = insert(store, keyed("acme"), T0 + 11).await;
    let report = poll(store, T0 + 20).await;
    assert_eq!((report.key_paced, report.parked), (1, 1), "{report:?}");
    assert!(store.task_get(&parked).await.unwrap().unwrap().parked);
    store.task_cancel(&paced, T0 + 30).await.unwrap();
    poll(store, T0 + 40).await;
    let next = store.task_get(&parked).await.unwrap().unwrap();
    assert!(
        !next.parked,
        "the cancelled task's place went to nobody: {next:?}"
    );
}

/// Two consumers polling at once over a key's first tasks: one place, one
/// task enqueued between them, the others parked.
pub async fn two_polls_at_once_give_one_place(store: &dyn TaskStore) {
    deploy_with(store, "mail", limited(Some(1))).await;
    for round in 0..5 {
        let key = format!("key-{round}");
        let tasks = (0..3).map(|_| keyed(&key)).collect();
        let now = T0 + round * 10;
        store
            .task_insert_many(waft_store::TaskInsertMany { tasks, now })
            .await
            .unwrap();
        let (a, b) = futures::join!(poll(store, now + 1), poll(store, now + 1));
        assert_eq!(
            (a.enqueued.len() + b.enqueued.len(), a.parked + b.parked),
            (1, 2),
            "{a:?} {b:?}"
        );
    }
}
