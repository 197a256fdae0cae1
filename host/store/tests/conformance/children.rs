//! Tasks that tasks make: children scheduled under the parent's lease, and
//! continuations that run on a task's success. Apart from `tasks.rs`
//! because these checks run the parent through its execution (claims,
//! leases, results) before they look at what it made.

use waft_core::{LambdaConfig, TaskStatus};
use waft_store::{
    Continuation, NewTask, ResultOutcome, StoreError, TaskInsertMany, TaskList, TaskStore,
};

use crate::support::*;

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

/// A child whose parent's execution chose its id is stored under that id,
/// and a repeat with the child's idempotency key answers the first child
/// whatever id it names; an id is refused without a lease or in any other
/// spelling than a ULID's, and nothing is written.
pub async fn a_child_keeps_the_id_its_parent_chose(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let parent = insert(store, new_task("mail"), T0).await;
    let lease = start(store, &parent, T0).await;
    let child = |id: &str, lease: Option<i64>| NewTask {
        parent_id: Some(parent.clone()),
        parent_lease: lease,
        idempotency_key: Some(format!("child:{parent}:0")),
        id: Some(id.into()),
        ..new_task("mail")
    };
    let chosen = "01KB0000000000000000000000";
    assert_eq!(insert(store, child(chosen, Some(lease)), T0).await, chosen);
    let stored = store.task_get(chosen).await.unwrap().expect("the child");
    assert_eq!(stored.parent_id, Some(parent.clone()));
    let again = store
        .task_insert_many(TaskInsertMany {
            tasks: vec![child("01KB0000000000000000000001", Some(lease))],
            now: T0,
        })
        .await
        .unwrap();
    assert_eq!((again[0].id.as_str(), again[0].created), (chosen, false));
    for (id, lease) in [
        ("01KB0000000000000000000002", None),
        ("01kb0000000000000000000002", Some(lease)),
        ("not-an-id", Some(lease)),
    ] {
        let refused = store
            .task_insert_many(TaskInsertMany {
                tasks: vec![NewTask {
                    idempotency_key: None,
                    ..child(id, lease)
                }],
                now: T0,
            })
            .await;
        assert!(
            matches!(refused, Err(StoreError::Invalid(_))),
            "{id}: {refused:?}"
        );
    }
    let children = TaskList {
        parent_id: Some(parent.clone()),
        ..TaskList::default()
    };
    assert_eq!(store.task_list(children).await.unwrap().len(), 1);
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
            key: Some("account-7".into()),
        }),
        key: Some("account-1".into()),
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
            next[0].priority,
            next[0].key.as_deref()
        ),
        ("mail", &b"out"[..], "next", 1, Some("account-7"))
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

/// A task's trace context comes back with its enqueue and its claim, and
/// its continuation joins the same trace; a task without one has none.
pub async fn a_trace_context_travels_with_the_task_and_its_continuation(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let trace = waft_core::TraceContext::parse(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        Some("vendor=opaque"),
    )
    .unwrap();
    let traced = insert(
        store,
        NewTask {
            trace: Some(trace.clone()),
            continuation: Some(Continuation {
                lambda: "mail".into(),
                ..Continuation::default()
            }),
            ..new_task("mail")
        },
        T0,
    )
    .await;
    let plain = insert(store, new_task("mail"), T0).await;
    let report = poll(store, T0).await;
    let queued = |id: &str| report.enqueued.iter().find(|t| t.id == id).unwrap();
    assert_eq!(queued(&traced).trace.as_ref(), Some(&trace));
    assert_eq!(queued(&plain).trace, None);
    let claimed = claim(store, &traced, queued(&traced).enqueue_token, T0)
        .await
        .unwrap();
    assert_eq!(claimed.trace.as_ref(), Some(&trace));
    heartbeat(store, &traced, claimed.lease_token, None, T0)
        .await
        .unwrap();
    finish(store, &traced, claimed.lease_token, success(), T0)
        .await
        .unwrap();
    let next = poll(store, T0 + 1).await;
    let continued = next
        .enqueued
        .iter()
        .find(|t| t.id != plain)
        .expect("the continuation is enqueued");
    assert_eq!(continued.trace.as_ref(), Some(&trace));
}
