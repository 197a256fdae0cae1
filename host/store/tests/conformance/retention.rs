//! Retention: ended tasks are deleted, with all that is kept of them, once
//! their lambda's retention (or the installation's) has passed, oldest
//! first and a bounded batch at a time; never a dead letter, a live task,
//! a task a live parent or child still needs; dead letters go only by an
//! operator's purge; one process at a time holds the pruner's duty; and a
//! lambda is deleted with everything it has.

use std::time::Duration;

use waft_core::retention::Retention;
use waft_core::{LambdaConfig, TaskStatus};
use waft_store::{
    Cron, DeadPurge, DeadSelector, DutyTake, GateState, LambdaDelete, LambdaDeleted, NewTask,
    Pruned, ResultOutcome, SecretSet, StoreError, TaskPrune, TaskStore,
};

use crate::support::{
    T0, config, deploy, deploy_with, finish, gate, insert, new_task, retriable, start, status,
    success,
};

const HOUR: i64 = 3_600_000;

fn retention(items: &[&str]) -> Retention {
    Retention::parse_each(items.iter().copied()).unwrap()
}

async fn prune(store: &dyn TaskStore, installation: &[&str], now: i64, limit: u32) -> Pruned {
    store
        .task_prune(TaskPrune {
            now,
            retention: retention(installation),
            limit,
        })
        .await
        .unwrap()
}

/// A task of `lambda` run and ended with `outcome` at `at`.
async fn ended(store: &dyn TaskStore, lambda: &str, outcome: ResultOutcome, at: i64) -> String {
    let id = insert(store, new_task(lambda), at).await;
    let lease = start(store, &id, at).await;
    finish(store, &id, lease, outcome, at).await.unwrap();
    id
}

async fn gone(store: &dyn TaskStore, id: &str) -> bool {
    store.task_get(id).await.unwrap().is_none()
}

fn fatal() -> ResultOutcome {
    ResultOutcome::Fatal { error: "no".into() }
}

pub async fn ended_tasks_go_after_their_retention_with_all_kept_of_them(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let done = ended(store, "mail", success(), T0).await;
    let failed = ended(store, "mail", fatal(), T0).await;
    let cancelled = insert(store, new_task("mail"), T0).await;
    store.task_cancel(&cancelled, T0).await.unwrap();
    let waiting = insert(store, new_task("mail"), T0).await;
    assert!(!store.attempt_list(&done).await.unwrap().is_empty());
    let installation = ["success=1h", "fatal=2h", "cancelled=1h"];

    // Not yet: nothing ended an hour ago.
    let pruned = prune(store, &installation, T0 + HOUR, 100).await;
    assert_eq!(
        pruned,
        Pruned {
            tasks: 0,
            more: false
        }
    );

    let pruned = prune(store, &installation, T0 + HOUR + 1, 100).await;
    assert_eq!(pruned.tasks, 2, "the success and the cancellation");
    assert!(gone(store, &done).await && gone(store, &cancelled).await);
    assert!(
        store.attempt_list(&done).await.unwrap().is_empty(),
        "its attempts go too"
    );
    assert_eq!(status(store, &failed).await, TaskStatus::FatalFailure);
    assert_eq!(
        status(store, &waiting).await,
        TaskStatus::New,
        "live tasks are never pruned"
    );

    prune(store, &installation, T0 + 2 * HOUR + 1, 100).await;
    assert!(gone(store, &failed).await);
    assert_eq!(status(store, &waiting).await, TaskStatus::New);
    assert!(store.task_get(&waiting).await.unwrap().is_some());
}

pub async fn batches_are_bounded_and_take_the_oldest_first(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(ended(store, "mail", success(), T0 + i).await);
    }
    let now = T0 + HOUR + 10;
    assert_eq!(
        prune(store, &["success=1h"], now, 2).await,
        Pruned {
            tasks: 2,
            more: true
        }
    );
    assert!(gone(store, &ids[0]).await && gone(store, &ids[1]).await);
    assert!(!gone(store, &ids[2]).await);
    assert_eq!(prune(store, &["success=1h"], now, 2).await.tasks, 2);
    assert_eq!(
        prune(store, &["success=1h"], now, 2).await,
        Pruned {
            tasks: 1,
            more: false
        }
    );
    assert!(gone(store, &ids[4]).await);
}

pub async fn a_lambdas_own_retention_speaks_over_the_installations(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let own = |items: &[&str]| LambdaConfig {
        retention: retention(items),
        ..config()
    };
    deploy_with(store, "keep", own(&["success=forever"])).await;
    deploy_with(store, "brief", own(&["success=1s"])).await;
    assert_eq!(
        store
            .lambda_get("brief")
            .await
            .unwrap()
            .unwrap()
            .config
            .retention,
        retention(&["success=1s"]),
        "kept with the version"
    );
    let mail = ended(store, "mail", success(), T0).await;
    let keep = ended(store, "keep", success(), T0).await;
    let brief = ended(store, "brief", success(), T0).await;
    let keep_failed = ended(store, "keep", fatal(), T0).await;

    prune(store, &["success=1h", "fatal=1h"], T0 + 2_000, 100).await;
    assert!(gone(store, &brief).await, "its own, shorter");
    assert!(!gone(store, &mail).await && !gone(store, &keep).await);

    prune(store, &["success=1h", "fatal=1h"], T0 + 100 * HOUR, 100).await;
    assert!(gone(store, &mail).await);
    assert!(
        gone(store, &keep_failed).await,
        "an end it does not set: the installation's"
    );
    assert!(!gone(store, &keep).await, "kept forever");

    // Forever at the installation, for a lambda that sets nothing.
    let mail = ended(store, "mail", success(), T0).await;
    prune(store, &["success=forever"], T0 + 1000 * HOUR, 100).await;
    assert!(!gone(store, &mail).await);
}

pub async fn a_task_stays_while_its_parent_or_a_child_is_live(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let parent = insert(store, new_task("mail"), T0).await;
    let lease = start(store, &parent, T0).await;
    let child = |parent_lease| NewTask {
        parent_id: Some(parent.clone()),
        parent_lease: Some(parent_lease),
        ..new_task("mail")
    };
    let early = insert(store, child(lease), T0).await;
    let early_lease = start(store, &early, T0).await;
    finish(store, &early, early_lease, success(), T0)
        .await
        .unwrap();
    let late = insert(store, child(lease), T0).await;

    let later = T0 + 10 * HOUR;
    prune(store, &["success=1h"], later, 100).await;
    assert!(
        !gone(store, &early).await,
        "its parent is live: it may read the child's end"
    );

    finish(store, &parent, lease, success(), T0).await.unwrap();
    prune(store, &["success=1h"], later, 100).await;
    assert!(!gone(store, &parent).await, "a child of it is live");
    assert!(gone(store, &early).await, "its parent ended");

    let late_lease = start(store, &late, T0).await;
    finish(store, &late, late_lease, success(), T0)
        .await
        .unwrap();
    prune(store, &["success=1h"], later, 100).await;
    assert!(gone(store, &parent).await && gone(store, &late).await);
}

pub async fn dead_letters_stay_until_purged(store: &dyn TaskStore) {
    deploy_with(
        store,
        "mail",
        LambdaConfig {
            max_attempts: 1,
            ..config()
        },
    )
    .await;
    let mut dead = Vec::new();
    for collection in ["a", "a", "a", "b"] {
        let id = insert(
            store,
            NewTask {
                collection: Some(collection.into()),
                ..new_task("mail")
            },
            T0,
        )
        .await;
        let lease = start(store, &id, T0).await;
        assert_eq!(
            finish(store, &id, lease, retriable("x"), T0).await,
            Ok(TaskStatus::Dead)
        );
        dead.push(id);
    }
    let alive = insert(store, new_task("mail"), T0).await;
    let every_end = ["success=1s", "fatal=1s", "dropped=1s", "cancelled=1s"];
    prune(store, &every_end, T0 + 1000 * HOUR, 100).await;
    assert_eq!(
        status(store, &dead[0]).await,
        TaskStatus::Dead,
        "never pruned"
    );

    let purge = |selector, limit| DeadPurge { selector, limit };
    let refused = store
        .dead_purge(purge(
            DeadSelector::Ids(vec![dead[0].clone(), alive.clone()]),
            10,
        ))
        .await;
    assert!(
        matches!(refused, Err(StoreError::NotDead { .. })),
        "{refused:?}"
    );
    assert!(!gone(store, &dead[0]).await, "nothing half done");
    let unknown = store
        .dead_purge(purge(DeadSelector::Ids(vec!["nope".into()]), 10))
        .await;
    assert!(
        matches!(unknown, Err(StoreError::TaskNotFound(_))),
        "{unknown:?}"
    );

    let by_id = store
        .dead_purge(purge(DeadSelector::Ids(vec![dead[3].clone()]), 10))
        .await;
    assert_eq!(by_id.unwrap().tasks, 1);
    assert!(gone(store, &dead[3]).await);

    let filter = || DeadSelector::Filter {
        lambda: "mail".into(),
        collection: Some("a".into()),
    };
    assert_eq!(
        store.dead_purge(purge(filter(), 2)).await.unwrap(),
        Pruned {
            tasks: 2,
            more: true
        }
    );
    assert_eq!(store.dead_purge(purge(filter(), 2)).await.unwrap().tasks, 1);
    for id in &dead[..3] {
        assert!(gone(store, id).await);
    }
    assert_eq!(status(store, &alive).await, TaskStatus::New);
    let unknown = store
        .dead_purge(purge(
            DeadSelector::Filter {
                lambda: "nope".into(),
                collection: None,
            },
            10,
        ))
        .await;
    assert!(
        matches!(unknown, Err(StoreError::UnknownLambda(_))),
        "{unknown:?}"
    );
}

pub async fn one_holder_at_a_time_takes_a_duty(store: &dyn TaskStore) {
    let take = |holder: &str, now| DutyTake {
        name: "prune".into(),
        holder: holder.into(),
        now,
        lease_ms: Duration::from_secs(30).as_millis() as u64,
    };
    assert!(store.duty_take(take("a", T0)).await.unwrap());
    assert!(!store.duty_take(take("b", T0 + 1)).await.unwrap());
    assert!(
        store.duty_take(take("a", T0 + 20_000)).await.unwrap(),
        "renewed"
    );
    assert!(
        !store.duty_take(take("b", T0 + 40_000)).await.unwrap(),
        "the renewal counts"
    );
    assert!(
        store.duty_take(take("b", T0 + 50_001)).await.unwrap(),
        "taken over once lapsed"
    );
    assert!(!store.duty_take(take("a", T0 + 50_002)).await.unwrap());
}

pub async fn a_lambda_is_deleted_with_all_it_has_once_nothing_of_it_may_run(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    deploy(store, "other").await;
    let done = ended(store, "mail", success(), T0).await;
    let waiting = insert(store, new_task("mail"), T0).await;
    let others = insert(store, new_task("other"), T0).await;
    store
        .cron_create(Cron {
            id: "hourly".into(),
            lambda: "mail".into(),
            cron: "0 * * * *".into(),
            timezone: "UTC".into(),
            payload: b"{}".to_vec(),
            collection: None,
            key: None,
            priority: None,
            catch_up: false,
            next_at: T0 + HOUR,
            created_at: T0,
        })
        .await
        .unwrap();
    store
        .secret_set(SecretSet {
            lambda: "mail".into(),
            name: "TOKEN".into(),
            sealed: b"sealed".to_vec(),
            now: T0,
        })
        .await
        .unwrap();
    gate(store, "mail", GateState::Paused, T0).await;
    let delete = |drop_tasks| LambdaDelete {
        name: "mail".into(),
        drop_tasks,
    };

    let refused = store.lambda_delete(delete(false)).await;
    assert!(
        matches!(refused, Err(StoreError::LambdaHasTasks { live: 1, .. })),
        "{refused:?}"
    );
    assert!(
        store.lambda_get("mail").await.unwrap().is_some(),
        "nothing half done"
    );
    assert!(store.queue_retired(10).await.unwrap().is_empty());
    assert!(!gone(store, &done).await);

    let deleted = store.lambda_delete(delete(true)).await.unwrap();
    assert_eq!(deleted, LambdaDeleted { tasks: 2, live: 1 });
    assert!(store.lambda_get("mail").await.unwrap().is_none());
    assert!(gone(store, &done).await && gone(store, &waiting).await);
    assert!(store.attempt_list(&done).await.unwrap().is_empty());
    assert!(!gone(store, &others).await, "another lambda's tasks stay");
    assert!(
        store
            .component_get("digest-of-mail")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .component_get("digest-of-other")
            .await
            .unwrap()
            .is_some()
    );

    // Its queues are to be deleted from the queue service.
    assert_eq!(store.queue_retired(10).await.unwrap(), ["mail"]);

    let unknown = store.lambda_delete(delete(true)).await;
    assert!(
        matches!(unknown, Err(StoreError::UnknownLambda(_))),
        "{unknown:?}"
    );
    // Its name is free again, and deployed again it keeps its queues; its
    // versions go on past the deleted lambda's.
    deploy(store, "mail").await;
    assert_eq!(store.lambda_get("mail").await.unwrap().unwrap().version, 2);
    assert!(store.queue_retired(10).await.unwrap().is_empty());

    // Deleted for good: listed until the queues are gone.
    store.lambda_delete(delete(true)).await.unwrap();
    store
        .lambda_delete(LambdaDelete {
            name: "other".into(),
            drop_tasks: true,
        })
        .await
        .unwrap();
    assert_eq!(store.queue_retired(1).await.unwrap(), ["mail"]);
    assert_eq!(store.queue_retired(10).await.unwrap(), ["mail", "other"]);
    store.queue_retired_done("mail").await.unwrap();
    store.queue_retired_done("never").await.unwrap();
    assert_eq!(store.queue_retired(10).await.unwrap(), ["other"]);
}
