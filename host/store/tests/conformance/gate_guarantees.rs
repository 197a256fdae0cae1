//! The gates' promises on the paths a crash soak never takes: a pause
//! stops claims of queued tasks and holds lapsed ones with their attempt
//! counted, a resume reruns nothing and strands nothing, and no gate
//! touches an ended task.
//!
//! A resume racing a poll runs on concurrent callers: on Postgres at READ
//! COMMITTED on separate connections, which is where a read followed by an
//! unguarded write loses.

use waft_core::TaskStatus;
use waft_store::{AttemptOutcome, GateState, Refusal, TaskInsertMany, TaskStore};

use crate::support::{
    ENQUEUE_TIMEOUT, T0, claim, deploy, finish, gate, heartbeat, insert, new_task, poll, start,
    status, success,
};

/// A task on its queue when its lambda is paused is not claimed: the claim
/// is refused and the task held, and the resume queues it afresh.
pub async fn a_pause_stops_claims_of_queued_tasks(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let id = insert(store, new_task("mail"), T0).await;
    let token = poll(store, T0).await.enqueued[0].enqueue_token;
    gate(store, "mail", GateState::Paused, T0 + 1).await;
    assert_eq!(
        claim(store, &id, token, T0 + 2).await.map(|c| c.id),
        Err(Refusal::Held)
    );
    let task = store.task_get(&id).await.unwrap().unwrap();
    assert!(task.held && task.next_trigger_at.is_none(), "{task:?}");
    assert_eq!(task.attempt, 0, "a refused claim costs nothing");
    assert!(poll(store, T0 + 3).await.enqueued.is_empty());

    assert_eq!(gate(store, "mail", GateState::Open, T0 + 4).await, 1);
    let again = poll(store, T0 + 5).await.enqueued;
    assert_eq!(again.len(), 1);
    assert!(again[0].enqueue_token > token, "the old message is stale");
    assert!(claim(store, &id, token, T0 + 6).await.is_err());
    assert!(
        claim(store, &id, again[0].enqueue_token, T0 + 6)
            .await
            .is_ok()
    );
}

/// The reproduction: a backlog older than the enqueue timeout, a pause, a
/// poll that holds the waiting tasks. Their queue messages are still alive:
/// none may be claimed, and the resume releases exactly them.
pub async fn a_paused_backlog_is_not_run_and_resume_reruns_nothing(store: &dyn TaskStore) {
    deploy(store, "sleepy").await;
    let ids: Vec<String> = futures_ids(store, "sleepy", 4).await;
    let queued = poll(store, T0).await.enqueued;
    assert_eq!(queued.len(), 4);
    // One runs and succeeds before the pause.
    let lease = claim(store, &ids[0], queued[0].enqueue_token, T0 + 1)
        .await
        .unwrap()
        .lease_token;
    gate(store, "sleepy", GateState::Paused, T0 + 2).await;
    let later = T0 + ENQUEUE_TIMEOUT.as_millis() as i64 + 1;
    heartbeat(store, &ids[0], lease, None, later - 1)
        .await
        .unwrap();
    let report = poll(store, later).await;
    assert_eq!((report.held, report.enqueued.len()), (3, 0));
    for queued in &queued[1..] {
        assert_eq!(
            claim(store, &queued.id, queued.enqueue_token, later + 1)
                .await
                .map(|c| c.id),
            Err(Refusal::Held),
            "a held task was claimed"
        );
    }
    // The execution that was running when the pause came finishes.
    assert_eq!(
        finish(store, &ids[0], lease, success(), later + 2).await,
        Ok(TaskStatus::Success)
    );
    assert_eq!(gate(store, "sleepy", GateState::Open, later + 3).await, 3);
    assert_eq!(status(store, &ids[0]).await, TaskStatus::Success);
    let again = poll(store, later + 4).await.enqueued;
    let mut again: Vec<_> = again.into_iter().map(|t| t.id).collect();
    again.sort();
    let mut waiting = ids[1..].to_vec();
    waiting.sort();
    assert_eq!(again, waiting, "the finished task is not run again");
}

async fn futures_ids(store: &dyn TaskStore, lambda: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(insert(store, new_task(lambda), T0 - 10 + i as i64).await);
    }
    ids
}

/// A running task whose heartbeat lapses under a pause is held like any
/// waiting task: the lost execution is an attempt, a late result of it is
/// refused, and the resume runs the task again.
pub async fn a_lapsed_execution_under_a_pause_is_held_and_counted(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let id = insert(store, new_task("mail"), T0).await;
    let lease = start(store, &id, T0).await;
    gate(store, "mail", GateState::Paused, T0 + 1).await;
    let later = T0 + 20_001;
    assert_eq!(poll(store, later).await.held, 1);
    let task = store.task_get(&id).await.unwrap().unwrap();
    assert!(task.held && task.next_trigger_at.is_none());
    assert!(!task.status.is_terminal());
    assert_eq!(
        task.last_error.as_deref(),
        Some("the executor stopped heartbeating"),
        "the hold keeps why the execution lapsed"
    );
    assert_eq!(
        finish(store, &id, lease, success(), later + 1)
            .await
            .map(|_| ()),
        Err(Refusal::WrongState(task.status)),
        "a result after the lease lapsed is refused"
    );
    assert!(heartbeat(store, &id, lease, None, later + 1).await.is_err());
    let attempts = store.attempt_list(&id).await.unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].outcome, AttemptOutcome::Lost);
    assert_eq!(gate(store, "mail", GateState::Open, later + 2).await, 1);
    let again = poll(store, later + 3).await.enqueued;
    assert_eq!(again.len(), 1);
    let second = claim(store, &id, again[0].enqueue_token, later + 4)
        .await
        .unwrap();
    assert_eq!(second.attempt, 2);
}

/// Opening and dropping touch only tasks that have not ended.
pub async fn gates_never_touch_ended_tasks(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let done = insert(store, new_task("mail"), T0).await;
    let lease = start(store, &done, T0).await;
    let waiting = insert(store, new_task("mail"), T0).await;
    gate(store, "mail", GateState::Paused, T0 + 1).await;
    assert_eq!(poll(store, T0 + 2).await.held, 1);
    finish(store, &done, lease, success(), T0 + 3)
        .await
        .unwrap();
    store.task_cancel(&waiting, T0 + 4).await.unwrap();
    gate(store, "mail", GateState::Dropped, T0 + 5).await;
    assert_eq!(gate(store, "mail", GateState::Open, T0 + 6).await, 0);
    assert_eq!(status(store, &done).await, TaskStatus::Success);
    assert_eq!(status(store, &waiting).await, TaskStatus::Cancelled);
    for id in [&done, &waiting] {
        let task = store.task_get(id).await.unwrap().unwrap();
        assert!(!task.held && task.next_trigger_at.is_none(), "{task:?}");
    }
    assert!(poll(store, T0 + 7).await.enqueued.is_empty());
}

/// Every task is ended, due at some time, or held under a gate that
/// exists: a resume racing a poll that holds tasks must not strand them.
pub async fn a_resume_racing_a_poll_strands_nothing(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    for round in 0..15i64 {
        let now = T0 + round * 10;
        let tasks = (0..100).map(|_| new_task("mail")).collect();
        store
            .task_insert_many(TaskInsertMany { tasks, now })
            .await
            .unwrap();
        gate(store, "mail", GateState::Paused, now).await;
        let (_, _) = tokio::join!(poll(store, now + 1), async {
            tokio::task::yield_now().await;
            gate(store, "mail", GateState::Open, now + 1).await
        });
        assert_no_task_stranded(store).await;
        // Clear the round's tasks.
        while !poll(store, now + 5).await.enqueued.is_empty() {}
    }
}

/// The invariant of the state table that the gate races threaten.
pub async fn assert_no_task_stranded(store: &dyn TaskStore) {
    let gates = store.gate_list().await.unwrap();
    let mut after = None;
    loop {
        let page = store
            .task_list(waft_store::TaskList {
                after: after.clone(),
                limit: 1000,
                ..Default::default()
            })
            .await
            .unwrap();
        let Some(last) = page.last() else { break };
        after = Some(last.id.clone());
        for task in &page {
            if task.status.is_terminal() {
                assert!(
                    task.next_trigger_at.is_none() && !task.held,
                    "ended yet due or held: {task:?}"
                );
                continue;
            }
            if task.held {
                assert!(task.next_trigger_at.is_none());
                let gated = gates.iter().any(|g| {
                    g.lambda == task.lambda
                        && g.collection.as_ref().is_none_or(|c| *c == task.collection)
                });
                assert!(gated, "held with no gate left: {task:?}");
            } else {
                assert!(task.next_trigger_at.is_some(), "forgotten: {task:?}");
            }
        }
    }
}
