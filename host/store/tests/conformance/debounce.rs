//! Debounce: a key's debounced tasks not yet enqueued collapse into the
//! first, which runs once none has come for the window (at most ten windows
//! after it came) with the last one's request.

use std::time::Duration;

use waft_core::{LambdaConfig, TaskStatus};
use waft_store::{GateSet, GateState, NewTask, StoreError, TaskInsertMany, TaskStore};

use crate::support::*;

fn debounced(key: &str, payload: &str, window_ms: u64) -> NewTask {
    NewTask {
        key: Some(key.into()),
        payload: payload.as_bytes().to_vec(),
        debounce: Some(Duration::from_millis(window_ms)),
        ..new_task("mail")
    }
}

/// Inserts one task; its id and whether it was created.
async fn schedule(store: &dyn TaskStore, task: NewTask, now: i64) -> (String, bool) {
    let inserted = store
        .task_insert_many(TaskInsertMany {
            tasks: vec![task],
            now,
        })
        .await
        .unwrap()
        .remove(0);
    (inserted.id, inserted.created)
}

/// The first debounced task of a key waits for its window; each later one
/// answers its id, gives it its payload and moves its window on; other
/// keys, and the key's tasks without a debounce, are apart. Once it is
/// enqueued, the next debounced task of the key starts anew.
pub async fn a_keys_debounced_tasks_collapse_into_the_first(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let (first, created) = schedule(store, debounced("acme", "1", 5_000), T0).await;
    assert!(created);
    let task = store.task_get(&first).await.unwrap().unwrap();
    assert_eq!(
        (task.status, task.debounced, task.next_trigger_at),
        (TaskStatus::New, true, Some(T0 + 5_000))
    );
    let (again, created) = schedule(store, debounced("acme", "2", 5_000), T0 + 1_000).await;
    assert_eq!((again.as_str(), created), (first.as_str(), false));
    let (globex, created) = schedule(store, debounced("globex", "g", 5_000), T0 + 1_000).await;
    assert!(created && globex != first);
    let plain = NewTask {
        key: Some("acme".into()),
        ..new_task("mail")
    };
    let (plain, created) = schedule(store, plain, T0 + 1_000).await;
    assert!(created && plain != first);

    let task = store.task_get(&first).await.unwrap().unwrap();
    assert_eq!(
        (task.payload.as_slice(), task.next_trigger_at),
        (b"2".as_slice(), Some(T0 + 6_000))
    );
    let early = poll(store, T0 + 5_999).await;
    assert_eq!(
        early
            .enqueued
            .iter()
            .map(|t| t.id.as_str())
            .collect::<Vec<_>>(),
        [plain.as_str()]
    );
    let mut due: Vec<String> = poll(store, T0 + 6_000)
        .await
        .enqueued
        .into_iter()
        .map(|t| t.id)
        .collect();
    due.sort();
    let mut expected = vec![first.clone(), globex];
    expected.sort();
    assert_eq!(due, expected);
    let enqueued = store.task_get(&first).await.unwrap().unwrap();
    assert_eq!(
        (enqueued.status, enqueued.debounced),
        (TaskStatus::Enqueued, false)
    );

    let (next, created) = schedule(store, debounced("acme", "3", 5_000), T0 + 6_001).await;
    assert!(created && next != first);

    // Two of a key in one batch: the second collapses into the first.
    let inserted = store
        .task_insert_many(TaskInsertMany {
            tasks: vec![
                debounced("initech", "x", 100),
                debounced("initech", "y", 100),
            ],
            now: T0,
        })
        .await
        .unwrap();
    assert_eq!(inserted[0].id, inserted[1].id);
    assert_eq!((inserted[0].created, inserted[1].created), (true, false));
    let task = store.task_get(&inserted[0].id).await.unwrap().unwrap();
    assert_eq!(task.payload, b"y");
}

/// A stream of tasks closer together than the window postpones the first
/// to ten windows after it came, no further.
pub async fn a_stream_postpones_a_debounced_task_ten_windows_at_most(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let (first, _) = schedule(store, debounced("acme", "0", 1_000), T0).await;
    for i in 1..=25 {
        let now = T0 + 500 * i;
        let (id, created) = schedule(store, debounced("acme", &i.to_string(), 1_000), now).await;
        assert_eq!((id.as_str(), created), (first.as_str(), false));
        let task = store.task_get(&first).await.unwrap().unwrap();
        assert_eq!(
            task.next_trigger_at,
            Some((now + 1_000).min(T0 + 10_000)),
            "after {i}"
        );
    }
    let report = poll(store, T0 + 10_000).await;
    assert_eq!(report.enqueued.len(), 1);
    let task = store.task_get(&first).await.unwrap().unwrap();
    assert_eq!(task.payload, b"25");
}

/// A debounced task held by a gate or parked by its key's limit has left
/// its window: the next debounced task of its key starts anew, and the
/// first, released or unparked, runs as well (the two never clash).
pub async fn a_held_or_parked_debounced_task_lets_the_next_start_anew(store: &dyn TaskStore) {
    deploy_with(
        store,
        "mail",
        LambdaConfig {
            key_concurrency: Some(1),
            ..config()
        },
    )
    .await;
    let gate = |state| GateSet {
        lambda: "mail".into(),
        collection: None,
        state,
        now: T0,
    };
    let (held, _) = schedule(store, debounced("acme", "1", 100), T0).await;
    store.gate_set(gate(GateState::Paused)).await.unwrap();
    assert_eq!(poll(store, T0 + 100).await.held, 1);
    let (next, created) = schedule(store, debounced("acme", "2", 100), T0 + 101).await;
    assert!(created && next != held);
    store.gate_set(gate(GateState::Open)).await.unwrap();
    // The released task goes; the next, due later, is parked behind it.
    let released = poll(store, T0 + 102).await;
    assert_eq!(released.enqueued.len(), 1, "{released:?}");
    assert_eq!(released.enqueued[0].id, held);
    let report = poll(store, T0 + 201).await;
    assert_eq!(report.parked, 1, "{report:?}");
    let (third, created) = schedule(store, debounced("acme", "3", 100), T0 + 202).await;
    assert!(created && third != next);
    store.task_cancel(&held, T0 + 203).await.unwrap();
    // Unparked, `next` clashes with nothing: `third` holds the window.
    let report = poll(store, T0 + 204).await;
    assert_eq!(report.enqueued.len(), 1, "{report:?}");
    assert_eq!(report.enqueued[0].id, next);
}

/// Concurrent debounced inserts of one key make one task, and answer its
/// id to every caller.
pub async fn concurrent_debounced_inserts_make_one_task(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let inserts = (0..8).map(|i| schedule(store, debounced("acme", &i.to_string(), 5_000), T0));
    let answers = futures::future::join_all(inserts).await;
    let created = answers.iter().filter(|(_, created)| *created).count();
    assert_eq!(created, 1, "{answers:?}");
    assert!(
        answers.iter().all(|(id, _)| *id == answers[0].0),
        "{answers:?}"
    );
}

/// A debounce needs a key, leaves the time to its window, and is 1 ms to a
/// day long.
pub async fn bad_debounces_are_refused(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let base = debounced("acme", "1", 1_000);
    for (task, why) in [
        (
            NewTask {
                key: None,
                ..base.clone()
            },
            "needs a key",
        ),
        (
            NewTask {
                run_at: Some(T0 + 5),
                ..base.clone()
            },
            "no run time",
        ),
        (
            NewTask {
                idempotency_key: Some("once".into()),
                ..base.clone()
            },
            "idempotency key",
        ),
        (
            NewTask {
                parent_id: Some("01MCC5RM00QP23VEFERPNDR1ER".into()),
                ..base.clone()
            },
            "cannot be a child",
        ),
        (debounced("acme", "1", 0), "from 1ms to 1day"),
        (debounced("acme", "1", 86_400_001), "from 1ms to 1day"),
    ] {
        let refused = store
            .task_insert_many(TaskInsertMany {
                tasks: vec![task],
                now: T0,
            })
            .await
            .unwrap_err();
        assert!(
            matches!(&refused, StoreError::Invalid(message) if message.contains(why)),
            "{why}: {refused:?}"
        );
    }
    assert!(poll(store, T0 + 100_000).await.enqueued.is_empty());
}

/// A debounced task waiting for the slot of its key's rate keeps it when
/// later tasks collapse into it: however many come, it spends one slot, and
/// the key's next task is not pushed further back.
pub async fn a_debounced_task_keeps_its_keys_slot(store: &dyn TaskStore) {
    let config = LambdaConfig {
        key_rate: Some(waft_core::KeyRate {
            count: 1,
            period: Duration::from_secs(3600),
        }),
        ..config()
    };
    deploy_with(store, "mail", config).await;
    let plain = NewTask {
        key: Some("acme".into()),
        ..new_task("mail")
    };
    schedule(store, plain.clone(), T0).await;
    let (waiting, _) = schedule(store, debounced("acme", "1", 100), T0).await;
    assert_eq!(poll(store, T0).await.enqueued.len(), 1);
    // Its window over, it takes the key's next slot: an hour on.
    let report = poll(store, T0 + 100).await;
    assert_eq!(report.key_paced, 1, "{report:?}");
    let slot = T0 + 3_600_000;
    for i in 1..=5 {
        let now = T0 + 100 + 50 * i;
        let (id, created) = schedule(store, debounced("acme", &i.to_string(), 100), now).await;
        assert_eq!((id.as_str(), created), (waiting.as_str(), false));
        let task = store.task_get(&waiting).await.unwrap().unwrap();
        assert_eq!(
            (task.next_trigger_at, task.key_paced),
            (Some(slot), true),
            "after {i}"
        );
        assert!(poll(store, now).await.enqueued.is_empty());
    }
    let (next, _) = schedule(store, plain, T0 + 500).await;
    poll(store, T0 + 500).await;
    let next = store.task_get(&next).await.unwrap().unwrap();
    assert_eq!(next.next_trigger_at, Some(slot + 3_600_000), "{next:#?}");
    let gone = poll(store, slot).await;
    assert_eq!(gone.enqueued.len(), 1);
    assert_eq!(gone.enqueued[0].id, waiting);
    let task = store.task_get(&waiting).await.unwrap().unwrap();
    assert_eq!(task.payload, b"5");
}
