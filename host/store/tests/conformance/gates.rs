//! Gates: pausing, resuming and dropping a lambda or a collection.

use waft_core::TaskStatus;
use waft_store::{GateSet, GateState, NewTask, StoreError, TaskStore};

use crate::support::*;

pub async fn paused_tasks_wait_and_resume_in_order(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    deploy(store, "other").await;
    let first = insert(store, new_task("mail"), T0).await;
    let second = insert(store, new_task("mail"), T0 + 1).await;
    let other = insert(store, new_task("other"), T0).await;
    store
        .gate_set(GateSet {
            lambda: "mail".into(),
            collection: None,
            state: GateState::Paused,
            now: T0,
        })
        .await
        .unwrap();
    let report = poll(store, T0 + 10).await;
    assert_eq!(report.held, 2);
    assert_eq!(
        report
            .enqueued
            .iter()
            .map(|t| t.id.as_str())
            .collect::<Vec<_>>(),
        [other.as_str()]
    );
    let held = store.task_get(&first).await.unwrap().unwrap();
    assert!(held.held && held.next_trigger_at.is_none() && held.status == TaskStatus::New);
    assert!(
        poll(store, T0 + 20).await.enqueued.is_empty(),
        "held tasks cost the poll nothing"
    );
    assert_eq!(store.gate_list().await.unwrap().len(), 1);

    let released = store
        .gate_set(GateSet {
            lambda: "mail".into(),
            collection: None,
            state: GateState::Open,
            now: T0 + 30,
        })
        .await
        .unwrap();
    assert_eq!(released, 2);
    let ids: Vec<String> = poll(store, T0 + 40)
        .await
        .enqueued
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(ids, [first, second], "released in their due order");
    assert!(store.gate_list().await.unwrap().is_empty());
}

pub async fn gates_on_a_collection_and_drops(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let marketing = insert(
        store,
        NewTask {
            collection: Some("marketing".into()),
            ..new_task("mail")
        },
        T0,
    )
    .await;
    let reset = insert(
        store,
        NewTask {
            collection: Some("reset".into()),
            ..new_task("mail")
        },
        T0,
    )
    .await;
    store
        .gate_set(GateSet {
            lambda: "mail".into(),
            collection: Some("marketing".into()),
            state: GateState::Dropped,
            now: T0,
        })
        .await
        .unwrap();
    let report = poll(store, T0).await;
    assert_eq!((report.dropped, report.enqueued.len()), (1, 1));
    assert_eq!(report.enqueued[0].id, reset);
    let dropped = store.task_get(&marketing).await.unwrap().unwrap();
    assert_eq!(
        (dropped.status, dropped.next_trigger_at),
        (TaskStatus::Dropped, None)
    );

    // Pausing then dropping releases the held tasks to be dropped.
    let later = insert(
        store,
        NewTask {
            collection: Some("reset".into()),
            ..new_task("mail")
        },
        T0,
    )
    .await;
    let gate = |state| GateSet {
        lambda: "mail".into(),
        collection: Some("reset".into()),
        state,
        now: T0,
    };
    store.gate_set(gate(GateState::Paused)).await.unwrap();
    assert_eq!(poll(store, T0 + 1).await.held, 1);
    store.gate_set(gate(GateState::Dropped)).await.unwrap();
    assert_eq!(poll(store, T0 + 2).await.dropped, 1);
    assert_eq!(status(store, &later).await, TaskStatus::Dropped);

    let unknown = store
        .gate_set(GateSet {
            lambda: "nope".into(),
            collection: None,
            state: GateState::Paused,
            now: T0,
        })
        .await;
    assert!(
        matches!(unknown, Err(StoreError::UnknownLambda(_))),
        "{unknown:?}"
    );
    assert!(
        store
            .gate_list()
            .await
            .unwrap()
            .iter()
            .all(|g| g.lambda == "mail")
    );
}
