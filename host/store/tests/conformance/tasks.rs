//! Tasks as clients write them: insert with validation and idempotency
//! keys, concurrent inserts under one key, and cancel. What clients read
//! back is in `task_lists.rs`, children and continuations in `children.rs`:
//! each area holds the checks of one part of the store's contract.

use waft_core::TaskStatus;
use waft_store::{NewTask, Refusal, StoreError, TaskInsertMany, TaskList, TaskStore};

use crate::support::*;

pub async fn cancel_ends_a_task_and_its_lease(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let waiting = insert(store, new_task("mail"), T0 + 1000).await;
    let cancelled = store.task_cancel(&waiting, T0).await.unwrap();
    assert_eq!(
        (cancelled.status, cancelled.next_trigger_at),
        (TaskStatus::Cancelled, None)
    );
    let again = store.task_cancel(&waiting, T0).await;
    assert!(
        matches!(again, Err(StoreError::AlreadyEnded { .. })),
        "{again:?}"
    );
    assert!(matches!(
        store.task_cancel("nope", T0).await,
        Err(StoreError::TaskNotFound(_))
    ));

    let running = insert(store, new_task("mail"), T0).await;
    let lease = start(store, &running, T0).await;
    store.task_cancel(&running, T0 + 1).await.unwrap();
    assert_eq!(
        heartbeat(store, &running, lease, None, T0 + 2).await,
        Err(Refusal::WrongState(TaskStatus::Cancelled))
    );
}

pub async fn bad_input_is_refused_and_nothing_is_half_written(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    type Expected = fn(&StoreError) -> bool;
    let cases: Vec<(NewTask, Expected)> = vec![
        (new_task("nope"), |e| {
            matches!(e, StoreError::UnknownLambda(_))
        }),
        (
            NewTask {
                priority: Some(3),
                ..new_task("mail")
            },
            |e| matches!(e, StoreError::InvalidPriority { max: 2, .. }),
        ),
        (
            NewTask {
                collection: Some("Not Valid".into()),
                ..new_task("mail")
            },
            |e| matches!(e, StoreError::InvalidName(_)),
        ),
        (
            NewTask {
                payload: vec![0; 1025],
                ..new_task("mail")
            },
            |e| {
                matches!(
                    e,
                    StoreError::PayloadTooLarge {
                        size: 1025,
                        max: 1024,
                        ..
                    }
                )
            },
        ),
        (
            NewTask {
                run_at: Some(T0 + 11 * 365 * 86_400_000),
                ..new_task("mail")
            },
            |e| matches!(e, StoreError::TimeOutOfRange { .. }),
        ),
        (
            NewTask {
                parent_id: Some("nope".into()),
                ..new_task("mail")
            },
            |e| matches!(e, StoreError::Invalid(_)),
        ),
    ];
    for (bad, expected) in cases {
        // The bad task comes second: the good first one must not be stored.
        let result = store
            .task_insert_many(TaskInsertMany {
                tasks: vec![new_task("mail"), bad.clone()],
                now: T0,
            })
            .await;
        match result {
            Err(error) => assert!(expected(&error), "{bad:?}: {error}"),
            Ok(_) => panic!("accepted {bad:?}"),
        }
    }
    let stored = store.task_list(TaskList::default()).await.unwrap();
    assert!(stored.is_empty(), "half-written: {stored:?}");
}

pub async fn idempotency_keys_deduplicate(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let keyed = || NewTask {
        idempotency_key: Some("order-42".into()),
        ..new_task("mail")
    };
    let first = store
        .task_insert_many(TaskInsertMany {
            tasks: vec![keyed()],
            now: T0,
        })
        .await
        .unwrap();
    let second = store
        .task_insert_many(TaskInsertMany {
            tasks: vec![keyed()],
            now: T0,
        })
        .await
        .unwrap();
    assert!(first[0].created && !second[0].created);
    assert_eq!(first[0].id, second[0].id);
    assert_eq!(store.task_list(TaskList::default()).await.unwrap().len(), 1);
    // Keys of any characters, several in one batch, one of them held
    // already and one given twice.
    let keyed = |key: &str| NewTask {
        idempotency_key: Some(key.into()),
        ..new_task("mail")
    };
    let held = insert(store, keyed("nul\0 and \\"), T0).await;
    let keys = ["nul\0 and \\", "back\\slash", "plain", "back\\slash"];
    let answers = store
        .task_insert_many(TaskInsertMany {
            tasks: keys.iter().map(|key| keyed(key)).collect(),
            now: T0,
        })
        .await
        .unwrap();
    let created: Vec<bool> = answers.iter().map(|a| a.created).collect();
    assert_eq!(created, [false, true, true, false]);
    assert_eq!(answers[0].id, held);
    assert_eq!(answers[3].id, answers[1].id);
    assert_eq!(store.task_list(TaskList::default()).await.unwrap().len(), 4);
}

/// Concurrent inserts with one idempotency key make one task, and every
/// caller gets its id. Many rounds, so that the callers really overlap once
/// the connection pool is warm.
pub async fn concurrent_inserts_with_one_key_make_one_task(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    for round in 0..30 {
        let key = format!("order-{round}");
        let inserts = (0..8).map(|_| {
            store.task_insert_many(TaskInsertMany {
                tasks: vec![NewTask {
                    idempotency_key: Some(key.clone()),
                    ..new_task("mail")
                }],
                now: T0,
            })
        });
        let answers: Vec<_> = futures::future::join_all(inserts)
            .await
            .into_iter()
            .map(|answer| answer.unwrap().remove(0))
            .collect();
        assert_eq!(
            answers.iter().filter(|a| a.created).count(),
            1,
            "{answers:?}"
        );
        assert!(answers.iter().all(|a| a.id == answers[0].id), "{answers:?}");
    }
    assert_eq!(
        store.task_list(TaskList::default()).await.unwrap().len(),
        30
    );
}
