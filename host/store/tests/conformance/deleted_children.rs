//! Children deleted before their parent read their ends: a child of
//! another lambda deleted with it (its tasks ended, or dropped with
//! `--drop-tasks`) or purged as a dead letter still ends for its parent.
//! The parent reads the end it had (a dropped live child reads `dropped`,
//! saying it was deleted), is woken when it was suspended waiting for it,
//! and is never told the child is not its own.

use waft_core::{LambdaConfig, TaskStatus};
use waft_store::{
    ChildEnd, ChildrenState, DeadPurge, DeadSelector, LambdaDelete, Millis, NewTask, Refusal,
    ResultOutcome, StoreError, TaskChildrenRead, TaskStore, Wait,
};

use crate::support::{T0, config, deploy_with, finish, insert, new_task, poll, start};

const CENTURY: Millis = T0 + 100 * 366 * 86_400_000;

/// Deploys `parent`, which may schedule tasks of `child`, and `child`,
/// whose tasks have one attempt each.
async fn two_owners(store: &dyn TaskStore) {
    let parents = LambdaConfig {
        allowed_children: vec!["child".into()],
        ..config()
    };
    deploy_with(store, "parent", parents).await;
    deploy_child(store).await;
}

async fn deploy_child(store: &dyn TaskStore) {
    let once = LambdaConfig {
        max_attempts: 1,
        ..config()
    };
    deploy_with(store, "child", once).await;
}

/// A task of `child` scheduled by `parent` under `lease`.
async fn child_of(store: &dyn TaskStore, parent: &str, lease: i64, now: Millis) -> String {
    let child = NewTask {
        parent_id: Some(parent.to_owned()),
        parent_lease: Some(lease),
        ..new_task("child")
    };
    insert(store, child, now).await
}

async fn read(
    store: &dyn TaskStore,
    id: &str,
    lease: i64,
    children: &[&str],
) -> Result<Result<ChildrenState, Refusal>, StoreError> {
    store
        .task_children_read(TaskChildrenRead {
            id: id.to_owned(),
            lease_token: lease,
            children: children.iter().map(|c| (*c).to_owned()).collect(),
        })
        .await
}

fn waiting_for(ids: &[&str]) -> ResultOutcome {
    ResultOutcome::Suspend {
        until: CENTURY,
        wait: Wait::Children {
            ids: ids.iter().map(|c| (*c).to_owned()).collect(),
        },
    }
}

fn delete(drop_tasks: bool) -> LambdaDelete {
    LambdaDelete {
        name: "child".into(),
        drop_tasks,
    }
}

/// The one end read, when every child listed has ended.
fn the_end(read: Result<Result<ChildrenState, Refusal>, StoreError>) -> ChildEnd {
    match read {
        Ok(Ok(ChildrenState::Ended(mut ends))) if ends.len() == 1 => ends.remove(0),
        other => panic!("expected one child's end, got {other:?}"),
    }
}

pub async fn an_ended_child_deleted_with_its_lambda_keeps_its_end(store: &dyn TaskStore) {
    two_owners(store).await;
    let parent = insert(store, new_task("parent"), T0).await;
    let lease = start(store, &parent, T0).await;
    let child = child_of(store, &parent, lease, T0).await;
    let child_lease = start(store, &child, T0 + 1).await;
    let output = ResultOutcome::Success {
        output: Some(b"42".to_vec()),
    };
    finish(store, &child, child_lease, output, T0 + 2)
        .await
        .unwrap();

    // Nothing of `child` may still run: it goes without --drop-tasks.
    let deleted = store.lambda_delete(delete(false)).await.unwrap();
    assert_eq!((deleted.tasks, deleted.live), (1, 0));
    assert_eq!(
        the_end(read(store, &parent, lease, &[&child]).await),
        ChildEnd {
            id: child.clone(),
            status: TaskStatus::Success,
            output: Some(b"42".to_vec()),
            error: None,
        }
    );
    // Still only the parent's own children: another task reads none of it.
    let other = insert(store, new_task("parent"), T0 + 3).await;
    let other_lease = start(store, &other, T0 + 3).await;
    let refused = read(store, &other, other_lease, &[&child]).await;
    assert!(
        matches!(&refused, Err(StoreError::Invalid(why)) if why.contains("not a child")),
        "{refused:?}"
    );

    // The kept end goes with the parent, once its retention is over.
    for (id, lease) in [(&parent, lease), (&other, other_lease)] {
        finish(store, id, lease, crate::support::success(), T0 + 4)
            .await
            .unwrap();
    }
    let pruned = store
        .task_prune(waft_store::TaskPrune {
            now: T0 + 5 + 2 * 86_400_000,
            retention: waft_core::retention::Retention::installation_default(),
            limit: 100,
        })
        .await
        .unwrap();
    assert_eq!(pruned.tasks, 2);
}

pub async fn a_live_child_dropped_with_its_lambda_wakes_its_parent(store: &dyn TaskStore) {
    two_owners(store).await;
    let parent = insert(store, new_task("parent"), T0).await;
    let lease = start(store, &parent, T0).await;
    let child = child_of(store, &parent, lease, T0).await;
    let running = child_of(store, &parent, lease, T0).await;
    start(store, &running, T0 + 1).await;
    assert_eq!(
        finish(
            store,
            &parent,
            lease,
            waiting_for(&[&child, &running]),
            T0 + 2
        )
        .await,
        Ok(TaskStatus::Suspended)
    );
    let refused = store.lambda_delete(delete(false)).await;
    assert!(
        matches!(refused, Err(StoreError::LambdaHasTasks { live: 2, .. })),
        "{refused:?}"
    );

    let deleted = store.lambda_delete(delete(true)).await.unwrap();
    assert_eq!((deleted.tasks, deleted.live), (2, 2));
    // Its last children ended (dropped): the parent is due at once, by
    // the store's clock (an operator's delete carries no time).
    let clock = store.clock_now().await.unwrap();
    let due = store.task_get(&parent).await.unwrap().unwrap();
    assert!(
        due.next_trigger_at
            .is_some_and(|at| at <= clock.max(T0 + 3)),
        "still asleep: {:?}",
        due.next_trigger_at
    );
    let now = clock.max(T0 + 3);
    let lease = start(store, &parent, now).await;
    let ends = match read(store, &parent, lease, &[&child, &running]).await {
        Ok(Ok(ChildrenState::Ended(ends))) => ends,
        other => panic!("expected the children's ends, got {other:?}"),
    };
    assert_eq!(ends.len(), 2);
    for (end, id) in ends.iter().zip([&child, &running]) {
        assert_eq!(
            (&end.id, end.status, &end.output),
            (id, TaskStatus::Dropped, &None)
        );
        let why = end.error.as_deref().unwrap_or_default();
        assert!(why.contains("deleted") && why.contains("child"), "{why}");
    }

    // Deployed again, the name's new tasks are new children, not the old.
    deploy_child(store).await;
    let again = child_of(store, &parent, lease, now + 1).await;
    assert_eq!(
        read(store, &parent, lease, &[&again, &child])
            .await
            .unwrap(),
        Ok(ChildrenState::Waiting { live: 1 })
    );
}

pub async fn a_purged_dead_child_ends_for_its_parent(store: &dyn TaskStore) {
    two_owners(store).await;
    let parent = insert(store, new_task("parent"), T0).await;
    let lease = start(store, &parent, T0).await;
    let child = child_of(store, &parent, lease, T0).await;
    let child_lease = start(store, &child, T0 + 1).await;
    let failed = crate::support::retriable("the warehouse said no");
    assert_eq!(
        finish(store, &child, child_lease, failed, T0 + 2).await,
        Ok(TaskStatus::Dead)
    );
    let purged = store
        .dead_purge(DeadPurge {
            selector: DeadSelector::Ids(vec![child.clone()]),
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(purged.tasks, 1);
    let end = the_end(read(store, &parent, lease, &[&child]).await);
    assert_eq!((end.status, end.output), (TaskStatus::Dead, None));
    assert_eq!(end.error.as_deref(), Some("the warehouse said no"));

    // By a filter too, and a suspended parent wakes... it had woken already
    // when the child died; its next look finds the end all the same.
    let second = child_of(store, &parent, lease, T0 + 3).await;
    let second_lease = start(store, &second, T0 + 3).await;
    let failed = crate::support::retriable("again");
    finish(store, &second, second_lease, failed, T0 + 4)
        .await
        .unwrap();
    store
        .dead_purge(DeadPurge {
            selector: DeadSelector::Filter {
                lambda: "child".into(),
                collection: None,
            },
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(
        finish(
            store,
            &parent,
            lease,
            waiting_for(&[&child, &second]),
            T0 + 5
        )
        .await,
        Ok(TaskStatus::Suspended)
    );
    assert!(
        poll(store, T0 + 6)
            .await
            .enqueued
            .iter()
            .any(|t| t.id == parent),
        "a wait for purged children is over at once"
    );
}
