//! Tasks as clients see them: cancel, validation, idempotency keys, lists,
//! children and continuations.

use waft_core::{LambdaConfig, TaskStatus};
use waft_store::{
    Continuation, Depth, GateSet, GateState, LambdaStats, Millis, NewTask, Refusal, ResultOutcome,
    StatusCount, StoreError, TaskCount, TaskInsertMany, TaskList, TaskStore,
};

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
}

pub async fn lists_filter_and_page(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    deploy(store, "other").await;
    let parent = insert(store, new_task("mail"), T0).await;
    let mut children = Vec::new();
    for _ in 0..5 {
        children.push(
            insert(
                store,
                NewTask {
                    parent_id: Some(parent.clone()),
                    ..new_task("mail")
                },
                T0,
            )
            .await,
        );
    }
    insert(store, new_task("other"), T0).await;

    let by_parent = TaskList {
        parent_id: Some(parent.clone()),
        limit: 2,
        ..TaskList::default()
    };
    children.sort();
    assert_eq!(paged(store, by_parent).await, children);
    let mail = TaskList {
        lambda: Some("mail".into()),
        ..TaskList::default()
    };
    assert_eq!(store.task_list(mail).await.unwrap().len(), 6);
    let new = TaskList {
        status: Some(TaskStatus::New),
        ..TaskList::default()
    };
    assert_eq!(store.task_list(new).await.unwrap().len(), 7);
    let child = store.task_get(&children[0]).await.unwrap().unwrap();
    assert_eq!(child.parent_id.as_deref(), Some(parent.as_str()));
}

/// A list kept to some lambdas (a token's) fills its pages with their tasks
/// alone, however many of other lambdas' lie between, both ways; with no
/// lambda, it is empty.
pub async fn lists_keep_to_the_lambdas_given(store: &dyn TaskStore) {
    for name in ["mail", "billing", "other"] {
        deploy(store, name).await;
    }
    // Three tasks of others for each of mail's and billing's, each created
    // a millisecond after the last, so ids follow creation.
    let mut kept = Vec::new();
    for i in 0..40 {
        let lambda = match i % 8 {
            3 => "mail",
            7 => "billing",
            _ => "other",
        };
        let id = insert(store, new_task(lambda), T0 + i).await;
        if lambda != "other" {
            kept.push(id);
        }
    }
    let scoped = TaskList {
        lambdas: Some(vec!["mail".into(), "billing".into()]),
        limit: 3,
        ..TaskList::default()
    };
    let first = store.task_list(scoped.clone()).await.unwrap();
    assert_eq!(first.len(), 3, "a full page");
    assert_eq!(paged(store, scoped.clone()).await, kept);
    let newest = TaskList {
        newest_first: true,
        ..scoped.clone()
    };
    let mut reversed = kept.clone();
    reversed.reverse();
    assert_eq!(paged(store, newest).await, reversed);
    // With another filter, both hold.
    let mail = TaskList {
        lambda: Some("mail".into()),
        ..scoped.clone()
    };
    assert_eq!(paged(store, mail).await.len(), 5);
    let outside = TaskList {
        lambda: Some("other".into()),
        ..scoped.clone()
    };
    assert!(store.task_list(outside).await.unwrap().is_empty());
    let none = TaskList {
        lambdas: Some(Vec::new()),
        ..TaskList::default()
    };
    assert!(store.task_list(none).await.unwrap().is_empty());
}

/// Counts per status follow the tasks through their states, filtered by
/// lambda, collection and parent, and agree with the lists.
pub async fn counts_follow_statuses(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    deploy(store, "other").await;
    let count = |collection: Option<&str>, parent: Option<&str>| TaskCount {
        lambda: "mail".into(),
        collection: collection.map(str::to_owned),
        parent_id: parent.map(str::to_owned),
    };
    assert_eq!(store.task_count(count(None, None)).await.unwrap(), vec![]);
    let parent = insert(store, new_task("mail"), T0).await;
    for collection in ["a", "a", "b"] {
        insert(
            store,
            NewTask {
                collection: Some(collection.into()),
                parent_id: Some(parent.clone()),
                ..new_task("mail")
            },
            T0 + 60_000,
        )
        .await;
    }
    insert(store, new_task("other"), T0).await;
    let counted = |status, count| StatusCount { status, count };
    assert_eq!(
        store.task_count(count(None, None)).await.unwrap(),
        vec![counted(TaskStatus::New, 4)]
    );
    let lease = start(store, &parent, T0).await;
    assert_eq!(
        store.task_count(count(None, None)).await.unwrap(),
        vec![
            counted(TaskStatus::New, 3),
            counted(TaskStatus::Processing, 1)
        ]
    );
    finish(
        store,
        &parent,
        lease,
        ResultOutcome::Success { output: None },
        T0 + 1,
    )
    .await
    .unwrap();
    assert_eq!(
        store.task_count(count(None, None)).await.unwrap(),
        vec![counted(TaskStatus::New, 3), counted(TaskStatus::Success, 1)]
    );
    assert_eq!(
        store.task_count(count(Some("a"), None)).await.unwrap(),
        vec![counted(TaskStatus::New, 2)]
    );
    assert_eq!(
        store
            .task_count(count(Some("b"), Some(&parent)))
            .await
            .unwrap(),
        vec![counted(TaskStatus::New, 1)]
    );
    // A filter no stored name could match finds nothing, not an error.
    assert_eq!(
        store.task_count(count(Some("b\0\\"), None)).await.unwrap(),
        vec![]
    );
    assert_eq!(
        store
            .task_count(count(Some("a"), Some("nobody")))
            .await
            .unwrap(),
        vec![]
    );
    let listed = store
        .task_list(TaskList {
            lambda: Some("mail".into()),
            status: Some(TaskStatus::New),
            ..TaskList::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.len(), 3);
    assert!(matches!(
        store
            .task_count(TaskCount {
                lambda: "not a name!".into(),
                ..TaskCount::default()
            })
            .await,
        Err(StoreError::InvalidName(_))
    ));
}

/// A child scheduled with its parent's lease is created only while the
/// parent still holds that lease.
pub async fn children_of_a_superseded_execution_are_not_created(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let parent = insert(store, new_task("mail"), T0).await;
    let lease = start(store, &parent, T0).await;
    let child = |lease| NewTask {
        parent_id: Some(parent.clone()),
        parent_lease: Some(lease),
        ..new_task("mail")
    };
    insert(store, child(lease), T0).await;
    // The executor goes silent; the task runs again under a new lease.
    let later = T0 + 20_000;
    let newer = start(store, &parent, later).await;
    assert!(newer > lease);
    let stale = store
        .task_insert_many(TaskInsertMany {
            tasks: vec![child(lease)],
            now: later,
        })
        .await;
    assert!(
        matches!(stale, Err(StoreError::ParentLeaseLost { .. })),
        "{stale:?}"
    );
    insert(store, child(newer), later).await;
    let children = TaskList {
        parent_id: Some(parent.clone()),
        ..TaskList::default()
    };
    assert_eq!(store.task_list(children).await.unwrap().len(), 2);
}

/// A continuation declared at schedule time runs on the task's success with
/// its output, once; one that cannot be created leaves the success standing
/// with the reason in `last_error`.
pub async fn a_continuation_runs_once_on_success_with_the_output(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    deploy_with(
        store,
        "small",
        LambdaConfig {
            max_payload: waft_core::ByteSize::b(4),
            ..config()
        },
    )
    .await;
    let then = |lambda: &str| NewTask {
        continuation: Some(Continuation {
            lambda: lambda.into(),
            collection: Some("next".into()),
            priority: Some(1),
        }),
        ..new_task("mail")
    };
    let first = insert(store, then("mail"), T0).await;
    let lease = start(store, &first, T0).await;
    let output = ResultOutcome::Success {
        output: Some(b"out".to_vec()),
    };
    finish(store, &first, lease, output.clone(), T0)
        .await
        .unwrap();
    // A repeated delivery of the result is refused and makes nothing.
    assert!(
        finish(store, &first, lease, output.clone(), T0)
            .await
            .is_err()
    );
    let children = |parent: &str| TaskList {
        parent_id: Some(parent.into()),
        ..TaskList::default()
    };
    let next = store.task_list(children(&first)).await.unwrap();
    assert_eq!(next.len(), 1, "{next:#?}");
    assert_eq!(
        (
            next[0].lambda.as_str(),
            next[0].payload.as_slice(),
            next[0].collection.as_str(),
            next[0].priority
        ),
        ("mail", &b"out"[..], "next", 1)
    );

    // The output is over the next lambda's payload limit.
    let big = insert(store, then("small"), T0).await;
    let lease = start(store, &big, T0).await;
    let output = ResultOutcome::Success {
        output: Some(b"too long".to_vec()),
    };
    assert_eq!(
        finish(store, &big, lease, output, T0).await,
        Ok(TaskStatus::Success)
    );
    assert!(store.task_list(children(&big)).await.unwrap().is_empty());
    let task = store.task_get(&big).await.unwrap().unwrap();
    assert!(
        task.last_error
            .as_deref()
            .is_some_and(|e| e.contains("continuation was not created")),
        "{task:#?}"
    );

    let unknown = store
        .task_insert_many(TaskInsertMany {
            tasks: vec![then("nope")],
            now: T0,
        })
        .await;
    assert!(
        matches!(unknown, Err(StoreError::UnknownLambda(_))),
        "{unknown:?}"
    );
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

/// A range of creation times lists the tasks created in it, oldest or
/// newest first, page by page; times no task can have find none.
pub async fn lists_by_creation_time_both_ways(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let mut ids = Vec::new();
    for minute in 0..6 {
        ids.push(insert(store, new_task("mail"), T0 + minute * 60_000).await);
    }
    let range = TaskList {
        lambda: Some("mail".into()),
        created_from: Some(T0 + 60_000),
        created_before: Some(T0 + 240_000),
        limit: 2,
        ..TaskList::default()
    };
    assert_eq!(paged(store, range.clone()).await, ids[1..4]);
    let newest = TaskList {
        newest_first: true,
        ..range.clone()
    };
    let mut reversed = ids[1..4].to_vec();
    reversed.reverse();
    assert_eq!(paged(store, newest).await, reversed);
    let everything = TaskList {
        newest_first: true,
        limit: 2,
        ..TaskList::default()
    };
    let mut all = ids.clone();
    all.reverse();
    assert_eq!(paged(store, everything).await, all);
    for (from, before) in [
        (Some(i64::MAX), None),
        (None, Some(-5)),
        (Some(T0), Some(T0)),
    ] {
        let none = TaskList {
            created_from: from,
            created_before: before,
            ..TaskList::default()
        };
        assert_eq!(
            store.task_list(none).await.unwrap(),
            vec![],
            "{from:?}..{before:?}"
        );
    }
}

/// The overview counts every lambda's tasks where they are: ready per
/// priority with the oldest due time, waiting, held, running, dead, and
/// the executions that ended in the window.
pub async fn lambda_stats_follow_the_tasks(store: &dyn TaskStore) {
    let three = LambdaConfig {
        priorities: 3,
        max_attempts: 1,
        ..config()
    };
    deploy_with(store, "mail", three).await;
    deploy(store, "other").await;
    deploy(store, "idle").await;
    assert_eq!(store.lambda_stats(T0, T0 - 1).await.unwrap(), vec![]);

    let running = insert(store, new_task("mail"), T0).await;
    start(store, &running, T0).await;
    let done = insert(store, new_task("mail"), T0).await;
    let lease = start(store, &done, T0).await;
    let success = ResultOutcome::Success { output: None };
    finish(store, &done, lease, success, T0 + 5).await.unwrap();
    let failing = insert(store, new_task("mail"), T0).await;
    let lease = start(store, &failing, T0).await;
    finish(store, &failing, lease, retriable("no"), T0 + 5)
        .await
        .unwrap();
    let priority = |p: u8, due: Millis| NewTask {
        priority: Some(p),
        run_at: Some(due),
        ..new_task("mail")
    };
    insert(store, priority(0, T0 + 20), T0).await;
    insert(store, priority(0, T0 + 10), T0).await;
    insert(store, priority(2, T0 + 30), T0).await;
    insert(store, priority(2, T0 + 60_000), T0).await;
    store
        .gate_set(GateSet {
            lambda: "other".into(),
            collection: None,
            state: GateState::Paused,
            now: T0,
        })
        .await
        .unwrap();
    insert(store, new_task("other"), T0).await;
    poll(store, T0 + 100).await;

    let stats = store.lambda_stats(T0 + 1000, T0).await.unwrap();
    let mail = LambdaStats {
        lambda: "mail".into(),
        ready: vec![
            Depth {
                priority: 0,
                count: 2,
                oldest_due: T0 + 10,
            },
            Depth {
                priority: 2,
                count: 1,
                oldest_due: T0 + 30,
            },
        ],
        waiting: 1,
        held: 0,
        running: 1,
        dead: 1,
        succeeded: 1,
        failed: 1,
    };
    let other = LambdaStats {
        lambda: "other".into(),
        held: 1,
        ..LambdaStats::default()
    };
    assert_eq!(stats, vec![mail.clone(), other.clone()]);
    // Executions that ended before the window are not counted.
    let later = store.lambda_stats(T0 + 1000, T0 + 6).await.unwrap();
    assert_eq!(
        later,
        vec![
            LambdaStats {
                succeeded: 0,
                failed: 0,
                ..mail
            },
            other
        ]
    );
}

/// Every id of a list, page after page, each page within the list's limit.
async fn paged(store: &dyn TaskStore, list: TaskList) -> Vec<String> {
    let mut seen = Vec::new();
    let mut page = store.task_list(list.clone()).await.unwrap();
    while !page.is_empty() {
        assert!(page.len() <= list.limit as usize, "a page over the limit");
        seen.extend(page.iter().map(|t| t.id.clone()));
        let after = page.last().map(|t| t.id.clone());
        page = store
            .task_list(TaskList {
                after,
                ..list.clone()
            })
            .await
            .unwrap();
    }
    seen
}
