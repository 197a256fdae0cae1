//! ATF's state table: the happy path, every refusal, lost messages, lapsed
//! claims and executors, retries, fatal failures, dead letters, the backlog.

use std::time::Duration;

use waft_core::{LambdaConfig, TaskStatus};
use waft_store::{
    AttemptOutcome, DeadRedrive, DeadSelector, NewTask, Refusal, ResultOutcome, StoreError,
    TaskStore,
};

use crate::support::*;

pub async fn the_happy_path_follows_the_state_table(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let id = insert(store, new_task("mail"), T0).await;
    let task = store.task_get(&id).await.unwrap().unwrap();
    assert_eq!(
        (task.status, task.next_trigger_at, task.attempt),
        (TaskStatus::New, Some(T0), 0)
    );
    assert_eq!((task.collection.as_str(), task.priority), ("default", 0));

    // Not due before its time, and the poll says when it comes due.
    let early = poll(store, T0 - 1).await;
    assert!(early.enqueued.is_empty());
    assert_eq!(early.next_due, Some(T0));
    let report = poll(store, T0).await;
    assert_eq!(report.enqueued.len(), 1);
    // Next due: its own enqueue timeout, should no executor claim it.
    assert_eq!(report.next_due, Some(T0 + 60_000));
    let queued = &report.enqueued[0];
    assert_eq!(
        (queued.id.as_str(), queued.lambda.as_str()),
        (id.as_str(), "mail")
    );
    let task = store.task_get(&id).await.unwrap().unwrap();
    assert_eq!(task.status, TaskStatus::Enqueued);
    assert_eq!(
        task.next_trigger_at,
        Some(T0 + 60_000),
        "enqueued_at + enqueue_timeout"
    );
    // Enqueued once: the next poll does not enqueue it again.
    assert!(poll(store, T0 + 1).await.enqueued.is_empty());

    let claimed = claim(store, &id, queued.enqueue_token, T0 + 10)
        .await
        .unwrap();
    assert_eq!((claimed.attempt, claimed.lambda_version), (1, 1));
    assert_eq!(claimed.payload, b"{}");
    let task = store.task_get(&id).await.unwrap().unwrap();
    assert_eq!(task.status, TaskStatus::Claimed);
    assert_eq!(
        task.next_trigger_at,
        Some(T0 + 10 + 30_000),
        "claimed_at + claim_timeout"
    );

    heartbeat(store, &id, claimed.lease_token, Some("half way"), T0 + 20)
        .await
        .unwrap();
    let task = store.task_get(&id).await.unwrap().unwrap();
    assert_eq!(task.status, TaskStatus::Processing);
    assert_eq!(task.progress.as_deref(), Some("half way"));
    assert_eq!(
        task.next_trigger_at,
        Some(T0 + 20 + 20_000),
        "heartbeat_at + heartbeat_timeout"
    );

    let outcome = ResultOutcome::Success {
        output: Some(b"out".to_vec()),
    };
    assert_eq!(
        finish(store, &id, claimed.lease_token, outcome, T0 + 30).await,
        Ok(TaskStatus::Success)
    );
    let task = store.task_get(&id).await.unwrap().unwrap();
    assert_eq!(
        (task.status, task.next_trigger_at),
        (TaskStatus::Success, None)
    );
    assert_eq!(
        (task.output.as_deref(), task.finished_at),
        (Some(&b"out"[..]), Some(T0 + 30))
    );
    assert_eq!(
        task.log,
        Some(format!("the log of lease {}", claimed.lease_token))
    );
    assert!(poll(store, T0 + 10_000_000).await.enqueued.is_empty());
}

pub async fn every_refusal_is_precise(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let id = insert(store, new_task("mail"), T0).await;
    // A claim of a task that is not enqueued.
    assert_eq!(
        claim(store, &id, 0, T0).await.unwrap_err(),
        Refusal::WrongState(TaskStatus::New)
    );
    assert_eq!(
        claim(store, "no-such-task", 1, T0).await.unwrap_err(),
        Refusal::NotFound
    );

    let token = poll(store, T0).await.enqueued[0].enqueue_token;
    // A duplicate of an older message.
    assert_eq!(
        claim(store, &id, token - 1, T0).await.unwrap_err(),
        Refusal::StaleEnqueueToken { current: token }
    );
    let lease = claim(store, &id, token, T0).await.unwrap().lease_token;
    // A second claim of the same message.
    assert_eq!(
        claim(store, &id, token, T0).await.unwrap_err(),
        Refusal::WrongState(TaskStatus::Claimed)
    );
    assert_eq!(
        heartbeat(store, &id, lease - 1, None, T0).await,
        Err(Refusal::StaleLease { current: lease })
    );
    assert_eq!(
        finish(
            store,
            &id,
            lease + 1,
            ResultOutcome::Success { output: None },
            T0
        )
        .await,
        Err(Refusal::StaleLease { current: lease })
    );
    finish(
        store,
        &id,
        lease,
        ResultOutcome::Success { output: None },
        T0,
    )
    .await
    .unwrap();
    // A result after completion, and a heartbeat.
    assert_eq!(
        finish(
            store,
            &id,
            lease,
            ResultOutcome::Success { output: None },
            T0
        )
        .await,
        Err(Refusal::WrongState(TaskStatus::Success))
    );
    assert_eq!(
        heartbeat(store, &id, lease, None, T0).await,
        Err(Refusal::WrongState(TaskStatus::Success))
    );
    assert_eq!(
        finish(
            store,
            "no-such-task",
            1,
            ResultOutcome::Success { output: None },
            T0
        )
        .await,
        Err(Refusal::NotFound)
    );
}

pub async fn a_lost_queue_message_is_enqueued_again(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let id = insert(store, new_task("mail"), T0).await;
    let first = poll(store, T0).await.enqueued[0].enqueue_token;
    // Nobody claims it: after the enqueue timeout it is enqueued again, with
    // a new token, and the old message can no longer claim it.
    assert!(poll(store, T0 + 59_999).await.enqueued.is_empty());
    let again = poll(store, T0 + 60_000).await.enqueued;
    assert_eq!(again.len(), 1);
    assert!(again[0].enqueue_token > first);
    assert!(matches!(
        claim(store, &id, first, T0 + 60_001).await,
        Err(Refusal::StaleEnqueueToken { .. })
    ));
    claim(store, &id, again[0].enqueue_token, T0 + 60_001)
        .await
        .unwrap();
}

/// A claim that lapses is enqueued again under a new lease; the lapsed one
/// is stale. (It costs its attempt: see `an_expired_claim_costs_its_attempt`.)
pub async fn a_lapsed_claim_is_enqueued_again_under_a_new_lease(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let id = insert(store, new_task("mail"), T0).await;
    let token = poll(store, T0).await.enqueued[0].enqueue_token;
    let first = claim(store, &id, token, T0).await.unwrap();
    assert_eq!(first.attempt, 1);
    // The controller died after claiming: re-enqueued after the claim timeout.
    let again = poll(store, T0 + 30_000).await.enqueued;
    assert_eq!(again.len(), 1);
    let task = store.task_get(&id).await.unwrap().unwrap();
    assert_eq!((task.status, task.attempt), (TaskStatus::Enqueued, 1));
    let second = claim(store, &id, again[0].enqueue_token, T0 + 30_001)
        .await
        .unwrap();
    assert_eq!(second.attempt, 2);
    assert!(
        second.lease_token > first.lease_token,
        "lease tokens only grow"
    );
    // The first claim's lease is stale now.
    assert!(matches!(
        heartbeat(store, &id, first.lease_token, None, T0 + 30_002).await,
        Err(Refusal::StaleLease { .. })
    ));
}

/// A lease names which claim of its task it came from, and cannot be
/// guessed from the one before it: its low half is random.
pub async fn a_lease_counts_claims_and_cannot_be_guessed(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let id = insert(store, new_task("mail"), T0).await;
    let mut now = T0;
    let mut token = poll(store, now).await.enqueued[0].enqueue_token;
    let mut leases: Vec<i64> = Vec::new();
    for claims in 1..=8 {
        let lease = claim(store, &id, token, now).await.unwrap().lease_token;
        assert_eq!(waft_store::lease_counter(lease), claims, "lease {lease}");
        if let Some(last) = leases.last() {
            assert!(lease > *last, "leases of a task stay ordered");
            // What a guess from the last lease would try is stale.
            assert_eq!(
                heartbeat(store, &id, last + 1, None, now).await,
                Err(Refusal::StaleLease { current: lease })
            );
        }
        leases.push(lease);
        // The claim lapses; the task is enqueued again.
        now += 30_000;
        let again = poll(store, now).await.enqueued;
        if again.is_empty() {
            break;
        }
        token = again[0].enqueue_token;
    }
    let low: std::collections::HashSet<_> = leases
        .iter()
        .map(|lease| lease % waft_store::LEASE_STEP)
        .collect();
    assert_eq!(low.len(), leases.len(), "random low halves: {leases:?}");
}

pub async fn a_dead_executor_costs_an_attempt_and_the_last_one_is_dead(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let id = insert(store, new_task("mail"), T0).await;
    let mut token = poll(store, T0).await.enqueued[0].enqueue_token;
    let mut now = T0;
    for attempt in 1..=3 {
        let lease = claim(store, &id, token, now).await.unwrap().lease_token;
        heartbeat(store, &id, lease, None, now).await.unwrap();
        assert_eq!(store.task_get(&id).await.unwrap().unwrap().attempt, attempt);
        // The executor dies: no heartbeat within the timeout.
        now += 20_000;
        let report = poll(store, now).await;
        if attempt < 3 {
            assert_eq!(report.enqueued.len(), 1, "attempt {attempt}");
            token = report.enqueued[0].enqueue_token;
            // Should the executor come back, its result is refused.
            assert_eq!(
                finish(
                    store,
                    &id,
                    lease,
                    ResultOutcome::Success { output: None },
                    now
                )
                .await,
                Err(Refusal::WrongState(TaskStatus::Enqueued))
            );
        } else {
            assert_eq!((report.enqueued.len(), report.dead), (0, 1));
        }
    }
    let task = store.task_get(&id).await.unwrap().unwrap();
    assert_eq!(
        (task.status, task.next_trigger_at),
        (TaskStatus::Dead, None)
    );
    assert!(task.last_error.unwrap().contains("stopped heartbeating"));
    // Each lost execution is in the history, the last one said to be last.
    let attempts = store.attempt_list(&id).await.unwrap();
    let summary: Vec<_> = attempts.iter().map(|a| (a.attempt, a.outcome)).collect();
    assert_eq!(
        summary,
        [
            (1, AttemptOutcome::Lost),
            (2, AttemptOutcome::Lost),
            (3, AttemptOutcome::Lost)
        ]
    );
    assert!(
        attempts[2]
            .error
            .as_deref()
            .unwrap()
            .contains("the last one")
    );
}

pub async fn retriable_failures_back_off_then_die(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let id = insert(store, new_task("mail"), T0).await;
    let lease = start(store, &id, T0).await;
    assert_eq!(
        finish(store, &id, lease, retriable("busy"), T0).await,
        Ok(TaskStatus::RetriableFailure)
    );
    let task = store.task_get(&id).await.unwrap().unwrap();
    let retry_at = task.next_trigger_at.unwrap();
    // Backoff after one failure: 10 s with equal jitter, so within 5..=10 s.
    assert!((T0 + 5_000..=T0 + 10_000).contains(&retry_at), "{retry_at}");
    assert_eq!(task.last_error.as_deref(), Some("busy"));
    assert!(poll(store, retry_at - 1).await.enqueued.is_empty());

    // An explicit retry-after wins over the backoff.
    let lease = start(store, &id, retry_at).await;
    let outcome = ResultOutcome::Retriable {
        error: "rate limited".into(),
        retry_after: Some(Duration::from_secs(120)),
    };
    finish(store, &id, lease, outcome, retry_at).await.unwrap();
    let next = store
        .task_get(&id)
        .await
        .unwrap()
        .unwrap()
        .next_trigger_at
        .unwrap();
    assert_eq!(next, retry_at + 120_000);
    let retry_at = next;

    let lease = start(store, &id, retry_at).await;
    assert_eq!(store.task_get(&id).await.unwrap().unwrap().attempt, 3);
    assert_eq!(
        finish(store, &id, lease, retriable("still busy"), retry_at).await,
        Ok(TaskStatus::Dead)
    );
    let task = store.task_get(&id).await.unwrap().unwrap();
    assert_eq!(
        (task.status, task.next_trigger_at),
        (TaskStatus::Dead, None)
    );
    assert_eq!(task.last_error.as_deref(), Some("still busy"));
    // The log kept is the last execution's.
    assert_eq!(task.log, Some(format!("the log of lease {lease}")));
    // Every execution is in the history with its own error and log.
    let attempts = store.attempt_list(&id).await.unwrap();
    let summary: Vec<_> = attempts
        .iter()
        .map(|a| (a.attempt, a.outcome, a.error.as_deref().unwrap()))
        .collect();
    assert_eq!(
        summary,
        [
            (1, AttemptOutcome::Retriable, "busy"),
            (2, AttemptOutcome::Retriable, "rate limited"),
            (3, AttemptOutcome::Retriable, "still busy"),
        ]
    );
    assert_eq!(
        attempts[2].log,
        Some(format!("the log of lease {}", attempts[2].lease_token))
    );
    assert_eq!(attempts[2].started_at, Some(retry_at));
    assert!(store.attempt_list("nope").await.unwrap().is_empty());
}

pub async fn a_fatal_failure_is_final(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let id = insert(store, new_task("mail"), T0).await;
    let lease = start(store, &id, T0).await;
    let outcome = ResultOutcome::Fatal {
        error: "no such user".into(),
    };
    assert_eq!(
        finish(store, &id, lease, outcome, T0).await,
        Ok(TaskStatus::FatalFailure)
    );
    let task = store.task_get(&id).await.unwrap().unwrap();
    assert_eq!(
        (task.next_trigger_at, task.last_error.as_deref()),
        (None, Some("no such user"))
    );
}

pub async fn dead_letters_are_redriven_with_a_fresh_budget(store: &dyn TaskStore) {
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
    for collection in ["a", "a", "b"] {
        let task = waft_store::NewTask {
            collection: Some(collection.into()),
            ..new_task("mail")
        };
        let id = insert(store, task, T0).await;
        let lease = start(store, &id, T0).await;
        assert_eq!(
            finish(store, &id, lease, retriable("x"), T0).await,
            Ok(TaskStatus::Dead)
        );
        dead.push(id);
    }
    let alive = insert(store, new_task("mail"), T0).await;

    // Redriving a task that is not dead changes nothing, even beside dead ones.
    let refused = store
        .dead_redrive(DeadRedrive {
            selector: DeadSelector::Ids(vec![dead[0].clone(), alive.clone()]),
            version: None,
            fresh: false,
            now: T0 + 1,
        })
        .await;
    assert!(
        matches!(refused, Err(StoreError::NotDead { .. })),
        "{refused:?}"
    );
    assert_eq!(status(store, &dead[0]).await, TaskStatus::Dead);

    // A version the lambda does not have: nothing changes.
    let unknown = store
        .dead_redrive(DeadRedrive {
            selector: DeadSelector::Ids(vec![dead[0].clone()]),
            version: Some(9),
            fresh: false,
            now: T0 + 1,
        })
        .await;
    assert!(
        matches!(unknown, Err(StoreError::UnknownVersion { version: 9, .. })),
        "{unknown:?}"
    );
    assert_eq!(status(store, &dead[0]).await, TaskStatus::Dead);

    // Pinned to version 1 with its budget.
    let by_id = store
        .dead_redrive(DeadRedrive {
            selector: DeadSelector::Ids(vec![dead[0].clone()]),
            version: Some(1),
            fresh: false,
            now: T0 + 1,
        })
        .await
        .unwrap();
    assert_eq!(by_id, 1);
    let task = store.task_get(&dead[0]).await.unwrap().unwrap();
    assert_eq!(
        (
            task.status,
            task.attempt,
            task.next_trigger_at,
            task.version
        ),
        (TaskStatus::New, 0, Some(T0 + 1), Some(1))
    );

    let by_filter = store
        .dead_redrive(DeadRedrive {
            selector: DeadSelector::Filter {
                lambda: "mail".into(),
                collection: Some("a".into()),
            },
            version: None,
            fresh: false,
            now: T0 + 2,
        })
        .await
        .unwrap();
    assert_eq!(by_filter, 1);
    assert_eq!(
        status(store, &dead[2]).await,
        TaskStatus::Dead,
        "other collection untouched"
    );
    // The redriven task runs again.
    let lease = start(store, &dead[1], T0 + 3).await;
    assert_eq!(
        finish(
            store,
            &dead[1],
            lease,
            ResultOutcome::Success { output: None },
            T0 + 3
        )
        .await,
        Ok(TaskStatus::Success)
    );
}

/// The backlog names, per queue, the oldest due task not yet started.
pub async fn the_backlog_is_the_oldest_waiting_task(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let first = insert(store, new_task("mail"), T0).await;
    insert(store, new_task("mail"), T0 + 10).await;
    let later = NewTask {
        run_at: Some(T0 + 100_000),
        ..new_task("mail")
    };
    insert(store, later, T0).await;
    let backlog = store.task_backlog(T0 + 20).await.unwrap();
    assert_eq!(backlog.len(), 1);
    assert_eq!((backlog[0].priority, backlog[0].oldest_due), (0, T0));
    start(store, &first, T0 + 20).await;
    let backlog = store.task_backlog(T0 + 20).await.unwrap();
    assert_eq!(backlog[0].oldest_due, T0 + 10);
}
