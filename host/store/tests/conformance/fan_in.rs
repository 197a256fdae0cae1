//! Fan-in: a task suspended waiting for its children wakes when the last
//! of them ends (however it ends: success, failure, cancel, a lapsed last
//! attempt), not before; children that ended while its execution ran wake
//! it at once; their ends are read in the order asked, under the lease,
//! and only for the task's own children; children ending concurrently with
//! the suspension never leave it asleep.

use waft_core::TaskStatus;
use waft_store::{
    ChildEnd, ChildrenState, NewTask, Refusal, ResultOutcome, StoreError, TaskChildrenRead,
    TaskClaimMany, TaskStore, Wait,
};

use crate::support::{
    CLAIM_TIMEOUT, HEARTBEAT_TIMEOUT, T0, config, deploy, deploy_with, finish, insert, new_task,
    poll, start, success,
};
use waft_core::LambdaConfig;

async fn children(store: &dyn TaskStore, parent: &str, lease: i64, n: usize) -> Vec<String> {
    let mut ids = Vec::with_capacity(n);
    for _ in 0..n {
        let child = NewTask {
            parent_id: Some(parent.to_owned()),
            parent_lease: Some(lease),
            ..new_task("mail")
        };
        ids.push(insert(store, child, T0).await);
    }
    ids
}

/// Polls once and claims each of `ids` (due by `now`): their leases.
async fn start_all(store: &dyn TaskStore, ids: &[String], now: i64) -> Vec<i64> {
    let report = poll(store, now).await;
    let claims = ids
        .iter()
        .map(|id| {
            let queued = report
                .enqueued
                .iter()
                .find(|t| t.id == *id)
                .expect("enqueued");
            (id.clone(), queued.enqueue_token)
        })
        .collect();
    store
        .task_claim_many(TaskClaimMany {
            claims,
            now,
            claim_timeout: CLAIM_TIMEOUT,
        })
        .await
        .unwrap()
        .into_iter()
        .map(|claimed| claimed.unwrap().lease_token)
        .collect()
}

fn waiting_for(ids: &[String]) -> ResultOutcome {
    ResultOutcome::Suspend {
        until: T0 + 100 * 366 * 86_400_000,
        wait: Wait::Children { ids: ids.to_vec() },
    }
}

async fn read(
    store: &dyn TaskStore,
    id: &str,
    lease: i64,
    children: &[String],
) -> Result<Result<ChildrenState, Refusal>, StoreError> {
    store
        .task_children_read(TaskChildrenRead {
            id: id.to_owned(),
            lease_token: lease,
            children: children.to_vec(),
        })
        .await
}

async fn due(store: &dyn TaskStore, id: &str) -> Option<i64> {
    store.task_get(id).await.unwrap().unwrap().next_trigger_at
}

pub async fn a_fan_in_wakes_when_its_last_child_ends(store: &dyn TaskStore) {
    let once = LambdaConfig {
        max_attempts: 1,
        ..config()
    };
    deploy_with(store, "mail", once).await;
    let parent = insert(store, new_task("mail"), T0).await;
    let lease = start(store, &parent, T0).await;
    let ids = children(store, &parent, lease, 4).await;
    assert_eq!(
        read(store, &parent, lease, &ids).await.unwrap(),
        Ok(ChildrenState::Waiting { live: 4 })
    );
    let leases = start_all(store, &ids, T0 + 1).await;
    let output = ResultOutcome::Success {
        output: Some(b"a\0\xff".to_vec()),
    };
    assert_eq!(
        finish(store, &ids[0], leases[0], output, T0 + 2).await,
        Ok(TaskStatus::Success)
    );
    let asleep = waiting_for(&ids);
    assert_eq!(
        finish(store, &parent, lease, asleep, T0 + 3).await,
        Ok(TaskStatus::Suspended)
    );
    let century = Some(T0 + 100 * 366 * 86_400_000);
    assert_eq!(due(store, &parent).await, century);
    let waiting = store.task_get(&parent).await.unwrap().unwrap();
    assert!(waiting.waiting_for_children && waiting.waiting_for_signal.is_none());
    let stats = store.lambda_stats(T0 + 3, T0).await.unwrap();
    let mail = stats.into_iter().find(|s| s.lambda == "mail").unwrap();
    assert_eq!(
        (
            mail.suspended,
            mail.waiting_for_children,
            mail.waiting_for_signal
        ),
        (1, 1, 0)
    );

    // Each end but the last leaves it asleep.
    let fatal = ResultOutcome::Fatal {
        error: "no such user".into(),
    };
    assert_eq!(
        finish(store, &ids[1], leases[1], fatal, T0 + 4).await,
        Ok(TaskStatus::FatalFailure)
    );
    store.task_cancel(&ids[2], T0 + 5).await.unwrap();
    assert_eq!(due(store, &parent).await, century);
    assert!(
        poll(store, T0 + 6)
            .await
            .enqueued
            .iter()
            .all(|t| t.id != parent)
    );

    // The last one's end, a lapse on its last attempt, wakes it.
    let lapsed = T0 + 1 + HEARTBEAT_TIMEOUT.as_millis() as i64 + CLAIM_TIMEOUT.as_millis() as i64;
    let report = poll(store, lapsed).await;
    assert_eq!(report.dead, 1, "{report:?}");
    assert_eq!(due(store, &parent).await, Some(lapsed));
    let lease = start(store, &parent, lapsed).await;
    assert!(
        !store
            .task_get(&parent)
            .await
            .unwrap()
            .unwrap()
            .waiting_for_children
    );
    let Ok(ChildrenState::Ended(ends)) = read(store, &parent, lease, &ids).await.unwrap() else {
        panic!("every child has ended");
    };
    let statuses: Vec<_> = ends.iter().map(|end| end.status).collect();
    assert_eq!(
        statuses,
        [
            TaskStatus::Success,
            TaskStatus::FatalFailure,
            TaskStatus::Cancelled,
            TaskStatus::Dead
        ]
    );
    assert_eq!(
        ends[0],
        ChildEnd {
            id: ids[0].clone(),
            status: TaskStatus::Success,
            output: Some(b"a\0\xff".to_vec()),
            error: None,
        }
    );
    assert_eq!(ends[1].error.as_deref(), Some("no such user"));
    // Asked in another order, answered in that order.
    let reversed: Vec<String> = ids.iter().rev().cloned().collect();
    let Ok(ChildrenState::Ended(again)) = read(store, &parent, lease, &reversed).await.unwrap()
    else {
        panic!("every child has ended");
    };
    let order: Vec<_> = again.iter().map(|end| end.id.clone()).collect();
    assert_eq!(order, reversed);
}

pub async fn children_ended_before_the_suspension_wake_it_at_once(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let parent = insert(store, new_task("mail"), T0).await;
    let lease = start(store, &parent, T0).await;
    let ids = children(store, &parent, lease, 2).await;
    let leases = start_all(store, &ids, T0 + 1).await;
    for (id, child_lease) in ids.iter().zip(leases) {
        finish(store, id, child_lease, success(), T0 + 2)
            .await
            .unwrap();
    }
    assert_eq!(
        finish(store, &parent, lease, waiting_for(&ids), T0 + 3).await,
        Ok(TaskStatus::Suspended)
    );
    assert_eq!(due(store, &parent).await, Some(T0 + 3));
    assert_eq!(poll(store, T0 + 3).await.enqueued.len(), 1);
}

pub async fn reads_of_children_are_fenced_and_their_own(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let parent = insert(store, new_task("mail"), T0).await;
    let stranger = insert(store, new_task("mail"), T0).await;
    let lease = start(store, &parent, T0).await;
    let ids = children(store, &parent, lease, 1).await;
    assert_eq!(
        read(store, &parent, lease - 1, &ids).await.unwrap(),
        Err(Refusal::StaleLease { current: lease })
    );
    assert_eq!(
        read(store, "no-such-task", lease, &ids).await.unwrap(),
        Err(Refusal::NotFound)
    );
    for foreign in [stranger.as_str(), "no-such-child", "a\0\\b"] {
        let asked = vec![ids[0].clone(), foreign.to_owned()];
        let refused = read(store, &parent, lease, &asked).await;
        assert!(
            matches!(&refused, Err(StoreError::Invalid(why)) if why.contains("not a child")),
            "{foreign:?}: {refused:?}"
        );
    }
    assert_eq!(
        read(store, &parent, lease, &[]).await.unwrap(),
        Ok(ChildrenState::Ended(Vec::new()))
    );
    // The same child twice is answered twice.
    let twice = vec![ids[0].clone(), ids[0].clone()];
    assert_eq!(
        read(store, &parent, lease, &twice).await.unwrap(),
        Ok(ChildrenState::Waiting { live: 1 })
    );
    // Ends that one wait could not return, an output counted as often as
    // it is listed.
    let child_lease = start_all(store, &ids, T0 + 1).await[0];
    let large = ResultOutcome::Success {
        output: Some(vec![7; 8 << 20]),
    };
    finish(store, &ids[0], child_lease, large, T0 + 2)
        .await
        .unwrap();
    assert!(matches!(
        read(store, &parent, lease, &ids).await.unwrap(),
        Ok(ChildrenState::Ended(_))
    ));
    let refused = read(store, &parent, lease, &twice).await;
    assert!(
        matches!(&refused, Err(StoreError::Invalid(why)) if why.contains("wait for fewer")),
        "{refused:?}"
    );
}

/// Children ending in transactions of their own while the parent's
/// suspension commits: whatever the order, the parent is woken.
pub async fn children_ending_during_the_suspension_never_leave_it_asleep(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    for round in 0..8 {
        let now = T0 + round * 10;
        let parent = insert(store, new_task("mail"), now).await;
        let lease = start(store, &parent, now).await;
        let ids = children(store, &parent, lease, 4).await;
        let leases = start_all(store, &ids, now + 1).await;
        let ends = ids
            .iter()
            .zip(&leases)
            .map(|(id, child_lease)| finish(store, id, *child_lease, success(), now + 2));
        let (suspended, ended) = tokio::join!(
            finish(store, &parent, lease, waiting_for(&ids), now + 2),
            futures::future::join_all(ends),
        );
        assert_eq!(suspended, Ok(TaskStatus::Suspended));
        assert!(ended.iter().all(|end| *end == Ok(TaskStatus::Success)));
        assert_eq!(
            due(store, &parent).await,
            Some(now + 2),
            "round {round}: the parent sleeps though every child ended"
        );
    }
}
