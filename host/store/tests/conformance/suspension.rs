//! Suspended tasks: a durable lambda's execution that ended in a long
//! wait. The task holds no lease and spends no attempt; it is due when its
//! wait is over and then runs as any due task does; cancel, gates and the
//! overview apply to it.

use waft_core::TaskStatus;
use waft_store::{AttemptOutcome, GateState, Refusal, ResultOutcome, TaskStore, Wait};

use crate::support::{
    T0, claim, deploy, finish, gate, insert, new_task, poll, start, status, success,
};

const WAKE: i64 = T0 + 60_000;

fn suspend_until(until: i64) -> ResultOutcome {
    ResultOutcome::Suspend {
        until,
        wait: Wait::Timer,
    }
}

/// Starts a task and suspends its execution until [`WAKE`].
async fn suspended(store: &dyn TaskStore) -> (String, i64) {
    deploy(store, "mail").await;
    let id = insert(store, new_task("mail"), T0).await;
    let lease = start(store, &id, T0 + 1).await;
    assert_eq!(
        finish(store, &id, lease, suspend_until(WAKE), T0 + 2).await,
        Ok(TaskStatus::Suspended)
    );
    (id, lease)
}

pub async fn a_suspended_task_waits_then_resumes_with_its_attempt(store: &dyn TaskStore) {
    let (id, lease) = suspended(store).await;
    let task = store.task_get(&id).await.unwrap().unwrap();
    assert_eq!(task.status, TaskStatus::Suspended);
    assert_eq!(task.attempt, 0, "a suspension spends no attempt");
    assert_eq!(task.next_trigger_at, Some(WAKE));
    assert!(!task.held);

    // The lease is gone: the suspended execution can say nothing more.
    assert_eq!(
        finish(store, &id, lease, success(), T0 + 3).await,
        Err(Refusal::WrongState(TaskStatus::Suspended))
    );

    // Not due before its wait is over, and the poll says when it is.
    let early = poll(store, WAKE - 1).await;
    assert!(early.enqueued.is_empty());
    assert_eq!(early.next_due, Some(WAKE));
    let due = poll(store, WAKE).await;
    assert_eq!(due.enqueued.len(), 1);
    let claimed = claim(store, &id, due.enqueued[0].enqueue_token, WAKE + 1)
        .await
        .unwrap();
    assert_eq!(
        claimed.attempt, 1,
        "the resumed execution is the same attempt"
    );
    assert!(claimed.lease_token > lease);
    assert_eq!(
        finish(store, &id, claimed.lease_token, success(), WAKE + 2).await,
        Ok(TaskStatus::Success)
    );

    let attempts = store.attempt_list(&id).await.unwrap();
    let seen: Vec<_> = attempts.iter().map(|a| (a.attempt, a.outcome)).collect();
    assert_eq!(
        seen,
        [(1, AttemptOutcome::Suspended), (1, AttemptOutcome::Success)]
    );
}

/// Suspensions never exhaust a task: a lambda on its last attempt may wait
/// as often as it likes.
pub async fn suspensions_spend_no_attempts(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let id = insert(store, new_task("mail"), T0).await;
    let mut now = T0;
    for _ in 0..8 {
        now += 10;
        let lease = start(store, &id, now).await;
        assert_eq!(
            finish(store, &id, lease, suspend_until(now + 5), now + 1).await,
            Ok(TaskStatus::Suspended)
        );
        now += 5;
    }
    let task = store.task_get(&id).await.unwrap().unwrap();
    assert_eq!((task.status, task.attempt), (TaskStatus::Suspended, 0));
}

pub async fn a_suspended_task_can_be_cancelled(store: &dyn TaskStore) {
    let (id, _) = suspended(store).await;
    let task = store.task_cancel(&id, T0 + 10).await.unwrap();
    assert_eq!(task.status, TaskStatus::Cancelled);
    assert_eq!(task.next_trigger_at, None);
    assert!(poll(store, WAKE).await.enqueued.is_empty());
}

/// A paused gate holds a suspended task once its wait is over; the resume
/// lets it run; a drop gate drops it.
pub async fn gates_hold_and_drop_suspended_tasks(store: &dyn TaskStore) {
    let (id, _) = suspended(store).await;
    gate(store, "mail", GateState::Paused, T0 + 10).await;
    // Still waiting: the gate does not touch it before it is due.
    assert!(poll(store, T0 + 20).await.enqueued.is_empty());
    assert_eq!(status(store, &id).await, TaskStatus::Suspended);
    assert!(poll(store, WAKE).await.enqueued.is_empty());
    let task = store.task_get(&id).await.unwrap().unwrap();
    assert!(task.held, "held once due: {task:?}");
    assert_eq!(
        task.status,
        TaskStatus::New,
        "its next attempt is its first"
    );

    assert_eq!(gate(store, "mail", GateState::Open, WAKE + 1).await, 1);
    let again = poll(store, WAKE + 2).await.enqueued;
    assert_eq!(again.iter().map(|t| &t.id).collect::<Vec<_>>(), [&id]);

    let (other, _) = {
        let id = insert(store, new_task("mail"), WAKE + 3).await;
        let lease = start(store, &id, WAKE + 4).await;
        finish(store, &id, lease, suspend_until(WAKE + 100), WAKE + 5)
            .await
            .unwrap();
        (id, lease)
    };
    gate(store, "mail", GateState::Dropped, WAKE + 6).await;
    poll(store, WAKE + 100).await;
    assert_eq!(status(store, &other).await, TaskStatus::Dropped);
}

/// The overview counts suspended tasks apart from the other waiting ones,
/// and as ready once their wait is over.
pub async fn the_overview_counts_suspended_tasks(store: &dyn TaskStore) {
    let (id, _) = suspended(store).await;
    let stats = store.lambda_stats(T0 + 10, T0).await.unwrap();
    let mail = stats.iter().find(|s| s.lambda == "mail").unwrap();
    assert_eq!((mail.suspended, mail.waiting, mail.running), (1, 0, 0));
    let stats = store.lambda_stats(WAKE, T0).await.unwrap();
    let mail = stats.iter().find(|s| s.lambda == "mail").unwrap();
    assert_eq!(mail.suspended, 0);
    assert_eq!(mail.ready.iter().map(|d| d.count).sum::<u64>(), 1);
    assert_eq!(status(store, &id).await, TaskStatus::Suspended);
}
