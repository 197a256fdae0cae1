//! The behaviour every `TaskStore` backend must have: ATF's state table,
//! every refusal, gates, dead letters, periodic tasks, chaining.
//!
//! Each check takes a fresh, empty store. Time is passed in, never read from
//! a clock, so timeouts are tested by moving `now`.

use std::time::Duration;

use waft_core::{Backoff, ByteSize, LambdaConfig, TaskStatus};
use waft_store::{
    AttemptOutcome, Continuation, Cron, CronMaterialize, DeadRedrive, DeadSelector, GateSet,
    GateState, GcReport, Heartbeat, LambdaDeploy, LambdaGc, LambdaRollback, Millis, NewTask,
    Refusal, ResultOutcome, StoreError, TaskClaimMany, TaskEnqueueReady, TaskHeartbeatMany,
    TaskInsertMany, TaskList, TaskResult, TaskSetResultMany, TaskStore, Token, TokenCreate,
    TokenRole,
};

pub const T0: Millis = 1_800_000_000_000;
pub const ENQUEUE_TIMEOUT: Duration = Duration::from_secs(60);
pub const CLAIM_TIMEOUT: Duration = Duration::from_secs(30);
pub const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(20);

pub fn config() -> LambdaConfig {
    LambdaConfig {
        max_attempts: 3,
        backoff: Backoff {
            base: Duration::from_secs(10),
            factor: 2.0,
            max: Duration::from_secs(600),
        },
        max_payload: ByteSize::kib(1),
        ..LambdaConfig::default()
    }
}

pub async fn deploy(store: &dyn TaskStore, name: &str) {
    deploy_with(store, name, config()).await;
}

pub async fn deploy_with(store: &dyn TaskStore, name: &str, config: LambdaConfig) {
    store
        .lambda_deploy(LambdaDeploy {
            name: name.into(),
            digest: format!("digest-of-{name}"),
            component: name.as_bytes().to_vec(),
            config,
            now: T0,
        })
        .await
        .unwrap();
}

pub fn new_task(lambda: &str) -> NewTask {
    NewTask {
        lambda: lambda.into(),
        payload: b"{}".to_vec(),
        ..NewTask::default()
    }
}

pub async fn insert(store: &dyn TaskStore, task: NewTask, now: Millis) -> String {
    store
        .task_insert_many(TaskInsertMany {
            tasks: vec![task],
            now,
        })
        .await
        .unwrap()
        .remove(0)
        .id
}

pub async fn poll(store: &dyn TaskStore, now: Millis) -> waft_store::EnqueueReport {
    store
        .task_enqueue_ready(TaskEnqueueReady {
            now,
            limit: 1000,
            enqueue_timeout: ENQUEUE_TIMEOUT,
        })
        .await
        .unwrap()
}

pub async fn claim(
    store: &dyn TaskStore,
    id: &str,
    token: i64,
    now: Millis,
) -> Result<waft_store::ClaimedTask, Refusal> {
    store
        .task_claim_many(TaskClaimMany {
            claims: vec![(id.to_owned(), token)],
            now,
            claim_timeout: CLAIM_TIMEOUT,
        })
        .await
        .unwrap()
        .remove(0)
}

pub async fn heartbeat(
    store: &dyn TaskStore,
    id: &str,
    lease: i64,
    progress: Option<&str>,
    now: Millis,
) -> Result<(), Refusal> {
    store
        .task_heartbeat_many(TaskHeartbeatMany {
            beats: vec![Heartbeat {
                id: id.into(),
                lease_token: lease,
                progress: progress.map(Into::into),
            }],
            now,
            heartbeat_timeout: HEARTBEAT_TIMEOUT,
        })
        .await
        .unwrap()
        .remove(0)
}

pub async fn finish(
    store: &dyn TaskStore,
    id: &str,
    lease: i64,
    outcome: ResultOutcome,
    now: Millis,
) -> Result<TaskStatus, Refusal> {
    store
        .task_set_result_many(TaskSetResultMany {
            results: vec![TaskResult {
                id: id.into(),
                lease_token: lease,
                outcome,
                log: Some(format!("the log of lease {lease}")),
            }],
            now,
        })
        .await
        .unwrap()
        .remove(0)
}

pub async fn status(store: &dyn TaskStore, id: &str) -> TaskStatus {
    store.task_get(id).await.unwrap().unwrap().status
}

/// Polls, claims and heartbeats one task: it is then `processing`.
pub async fn start(store: &dyn TaskStore, id: &str, now: Millis) -> i64 {
    let report = poll(store, now).await;
    let queued = report
        .enqueued
        .iter()
        .find(|t| t.id == id)
        .expect("enqueued");
    let claimed = claim(store, id, queued.enqueue_token, now).await.unwrap();
    heartbeat(store, id, claimed.lease_token, None, now)
        .await
        .unwrap();
    claimed.lease_token
}

fn retriable(error: &str) -> ResultOutcome {
    ResultOutcome::Retriable {
        error: error.into(),
        retry_after: None,
    }
}

pub async fn lambdas_are_versioned(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let v2 = store
        .lambda_deploy(LambdaDeploy {
            name: "mail".into(),
            digest: "digest-two".into(),
            component: b"two".to_vec(),
            config: LambdaConfig {
                max_attempts: 9,
                ..config()
            },
            now: T0 + 1,
        })
        .await
        .unwrap();
    assert_eq!((v2.version, v2.config.max_attempts), (2, 9));
    assert_eq!(store.lambda_get("mail").await.unwrap().unwrap().version, 2);
    let v1 = store.lambda_get_version("mail", 1).await.unwrap().unwrap();
    assert_eq!(v1.config, config());
    assert_eq!(
        store.component_get("digest-two").await.unwrap().unwrap(),
        b"two"
    );
    assert_eq!(store.lambda_list().await.unwrap().len(), 1);
    assert!(store.lambda_get("nope").await.unwrap().is_none());

    let bad = store
        .lambda_deploy(LambdaDeploy {
            name: "Bad Name".into(),
            digest: "d".into(),
            component: vec![],
            config: config(),
            now: T0,
        })
        .await;
    assert!(matches!(bad, Err(StoreError::InvalidName(_))), "{bad:?}");
}

/// Deploys version `n` of `mail` with its own component.
async fn deploy_version(store: &dyn TaskStore, n: u32) {
    let lambda = store
        .lambda_deploy(LambdaDeploy {
            name: "mail".into(),
            digest: format!("digest-{n}"),
            component: format!("component {n}").into_bytes(),
            config: LambdaConfig {
                max_attempts: n,
                ..config()
            },
            now: T0,
        })
        .await
        .unwrap();
    assert_eq!(lambda.version, n);
}

/// A pinned task runs its version; an unpinned one the version current at
/// its claim. A rollback makes an earlier version current again as a new
/// version. Garbage collection keeps the newest versions, the pinned ones
/// and the components they use.
pub async fn versions_pin_roll_back_and_are_collected(store: &dyn TaskStore) {
    for n in 1..=4 {
        deploy_version(store, n).await;
    }
    let pinned = insert(
        store,
        NewTask {
            version: Some(1),
            ..new_task("mail")
        },
        T0,
    )
    .await;
    let current = insert(store, new_task("mail"), T0).await;
    let report = poll(store, T0).await;
    let claims: Vec<_> = report
        .enqueued
        .iter()
        .map(|t| (t.id.clone(), t.enqueue_token))
        .collect();
    let claimed = store
        .task_claim_many(TaskClaimMany {
            claims,
            now: T0,
            claim_timeout: Duration::from_secs(10),
        })
        .await
        .unwrap();
    for answer in claimed {
        let task = answer.unwrap();
        let expected = if task.id == pinned { 1 } else { 4 };
        assert_eq!(task.lambda_version, expected, "{}", task.id);
    }
    assert_eq!(
        store.task_get(&pinned).await.unwrap().unwrap().version,
        Some(1)
    );
    assert_eq!(
        store.task_get(&current).await.unwrap().unwrap().version,
        None
    );
    let unknown = store
        .task_insert_many(TaskInsertMany {
            tasks: vec![NewTask {
                version: Some(9),
                ..new_task("mail")
            }],
            now: T0,
        })
        .await;
    assert!(
        matches!(unknown, Err(StoreError::UnknownVersion { version: 9, .. })),
        "{unknown:?}"
    );

    // Roll back to the previous version: version 5, a copy of version 3.
    let back = store
        .lambda_rollback(LambdaRollback {
            name: "mail".into(),
            to: None,
            now: T0,
        })
        .await
        .unwrap();
    assert_eq!(
        (back.version, back.digest.as_str(), back.config.max_attempts),
        (5, "digest-3", 3)
    );
    let again = store
        .lambda_rollback(LambdaRollback {
            name: "mail".into(),
            to: Some(5),
            now: T0,
        })
        .await;
    assert!(matches!(again, Err(StoreError::Invalid(_))), "{again:?}");

    // Keep two: versions 4 and 5 stay, 1 stays for its pinned task, 2 and 3
    // go; digest-3 is still used by version 5, digest-2 by nothing.
    let report = store
        .lambda_gc(LambdaGc {
            lambda: "mail".into(),
            keep: 2,
        })
        .await
        .unwrap();
    assert_eq!(
        report,
        GcReport {
            versions: 2,
            components: 1
        }
    );
    let left: Vec<u32> = store
        .lambda_versions("mail")
        .await
        .unwrap()
        .iter()
        .map(|l| l.version)
        .collect();
    assert_eq!(left, [1, 4, 5]);
    assert!(store.component_get("digest-2").await.unwrap().is_none());
    assert!(store.component_get("digest-3").await.unwrap().is_some());
    let gone = store
        .lambda_rollback(LambdaRollback {
            name: "mail".into(),
            to: Some(2),
            now: T0,
        })
        .await;
    assert!(
        matches!(gone, Err(StoreError::UnknownVersion { version: 2, .. })),
        "{gone:?}"
    );
    assert!(matches!(
        store.lambda_versions("nope").await,
        Err(StoreError::UnknownLambda(_))
    ));
}

/// Tokens are found by the hash of their secret until revoked.
pub async fn tokens_are_found_by_hash_until_revoked(store: &dyn TaskStore) {
    let owner = Token {
        id: "tok1".into(),
        name: "mail team".into(),
        role: TokenRole::Owner,
        lambdas: vec!["mail".into()],
        created_at: T0,
        revoked_at: None,
    };
    store
        .token_create(TokenCreate {
            token: owner.clone(),
            hash: "hash-1".into(),
        })
        .await
        .unwrap();
    assert_eq!(
        store.token_find("hash-1").await.unwrap(),
        Some(owner.clone())
    );
    assert_eq!(store.token_find("hash-2").await.unwrap(), None);
    let lambdaless = store
        .token_create(TokenCreate {
            token: Token {
                id: "tok2".into(),
                lambdas: Vec::new(),
                ..owner.clone()
            },
            hash: "hash-2".into(),
        })
        .await;
    assert!(
        matches!(lambdaless, Err(StoreError::Invalid(_))),
        "{lambdaless:?}"
    );
    assert!(store.token_revoke("tok1", T0 + 1).await.unwrap());
    assert_eq!(store.token_find("hash-1").await.unwrap(), None);
    let listed = store.token_list().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].revoked_at, Some(T0 + 1));
    assert!(!store.token_revoke("nope", T0).await.unwrap());
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

pub async fn the_happy_path_follows_the_state_table(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let id = insert(store, new_task("mail"), T0).await;
    let task = store.task_get(&id).await.unwrap().unwrap();
    assert_eq!(
        (task.status, task.next_trigger_at, task.attempt),
        (TaskStatus::New, Some(T0), 0)
    );
    assert_eq!((task.collection.as_str(), task.priority), ("default", 0));

    // Not due before its time.
    assert!(poll(store, T0 - 1).await.enqueued.is_empty());
    let report = poll(store, T0).await;
    assert_eq!(report.enqueued.len(), 1);
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
    let mut seen = Vec::new();
    let mut page = store.task_list(by_parent.clone()).await.unwrap();
    while !page.is_empty() {
        assert!(page.len() <= 2);
        seen.extend(page.iter().map(|t| t.id.clone()));
        let after = page.last().map(|t| t.id.clone());
        page = store
            .task_list(TaskList {
                after,
                ..by_parent.clone()
            })
            .await
            .unwrap();
    }
    children.sort();
    assert_eq!(seen, children);
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

pub async fn each_occurrence_materialises_once(store: &dyn TaskStore) {
    deploy(store, "report").await;
    let schedule = Cron {
        id: "nightly".into(),
        lambda: "report".into(),
        cron: "0 3 * * *".into(),
        timezone: "UTC".into(),
        payload: b"{}".to_vec(),
        collection: None,
        priority: Some(1),
        catch_up: false,
        next_at: T0,
        created_at: T0,
    };
    store.cron_create(schedule.clone()).await.unwrap();
    assert!(store.cron_due(T0 - 1, 10).await.unwrap().is_empty());
    assert_eq!(
        store.cron_due(T0, 10).await.unwrap(),
        std::slice::from_ref(&schedule)
    );

    let occurrence = |now| CronMaterialize {
        cron_id: "nightly".into(),
        expected: T0,
        occurrence: T0,
        next_at: T0 + 86_400_000,
        now,
    };
    let task = store
        .cron_materialize(occurrence(T0))
        .await
        .unwrap()
        .created()
        .expect("first wins");
    assert_eq!(
        store.cron_materialize(occurrence(T0 + 1)).await.unwrap(),
        waft_store::Materialized::AlreadyDone,
        "second loses"
    );
    let task = store.task_get(&task).await.unwrap().unwrap();
    assert_eq!(
        (task.cron_id.as_deref(), task.priority, task.scheduled_at),
        (Some("nightly"), 1, T0)
    );
    assert_eq!(store.cron_list().await.unwrap()[0].next_at, T0 + 86_400_000);

    // Eight consumers race for the next occurrence: one task, once.
    const DAY: i64 = 86_400_000;
    let racers = (0..8).map(|_| {
        store.cron_materialize(CronMaterialize {
            expected: T0 + DAY,
            occurrence: T0 + DAY,
            next_at: T0 + 2 * DAY,
            ..occurrence(T0 + DAY)
        })
    });
    let won: Vec<String> = futures::future::join_all(racers)
        .await
        .into_iter()
        .filter_map(|answer| answer.unwrap().created())
        .collect();
    assert_eq!(won.len(), 1, "{won:?}");

    // Skipping missed occurrences: the oldest is expected, the latest runs.
    let skipped = store
        .cron_materialize(CronMaterialize {
            expected: T0 + 2 * DAY,
            occurrence: T0 + 5 * DAY,
            next_at: T0 + 6 * DAY,
            ..occurrence(T0 + 5 * DAY)
        })
        .await
        .unwrap()
        .created()
        .expect("the latest occurrence");
    let skipped = store.task_get(&skipped).await.unwrap().unwrap();
    assert_eq!(skipped.scheduled_at, T0 + 5 * DAY);
    assert_eq!(store.cron_list().await.unwrap()[0].next_at, T0 + 6 * DAY);

    let missing = store
        .cron_materialize(CronMaterialize {
            cron_id: "nope".into(),
            ..occurrence(T0)
        })
        .await;
    assert!(
        matches!(missing, Err(StoreError::CronNotFound(_))),
        "{missing:?}"
    );
    let bad = store
        .cron_create(Cron {
            id: "x".into(),
            lambda: "nope".into(),
            ..schedule
        })
        .await;
    assert!(matches!(bad, Err(StoreError::UnknownLambda(_))), "{bad:?}");
    assert!(store.cron_delete("nightly").await.unwrap());
    assert!(!store.cron_delete("nightly").await.unwrap());
}

/// Deploys `paced`, with a quota of 10 tasks a second.
async fn deploy_paced(store: &dyn TaskStore) {
    let config = LambdaConfig {
        quota_per_sec: Some(10.0),
        ..config()
    };
    deploy_with(store, "paced", config).await;
}

/// A lambda with a quota of 10 tasks/s: a backlog of 50 due at once is
/// enqueued a second's worth at a time, each of the rest at its own slot;
/// a task scheduled later queues behind the backlog; a lambda without a
/// quota is not held back.
pub async fn a_quota_paces_a_backlog_and_spares_other_lambdas(store: &dyn TaskStore) {
    deploy_paced(store).await;
    deploy(store, "free").await;
    let tasks = (0..50)
        .map(|_| new_task("paced"))
        .chain((0..20).map(|_| new_task("free")))
        .collect();
    store
        .task_insert_many(TaskInsertMany { tasks, now: T0 })
        .await
        .unwrap();
    let count = |report: &waft_store::EnqueueReport, lambda: &str| {
        report
            .enqueued
            .iter()
            .filter(|t| t.lambda == lambda)
            .count()
    };

    let first = poll(store, T0).await;
    assert_eq!((count(&first, "paced"), count(&first, "free")), (10, 20));
    assert_eq!(first.paced, 40);
    assert!(poll(store, T0 - 1).await.enqueued.is_empty());

    let late = insert(store, new_task("paced"), T0 + 1000).await;
    // Slots T0 ..= T0 + 1 s: eleven of the backlog; the late task waits.
    let second = poll(store, T0 + 1000).await;
    assert_eq!(count(&second, "paced"), 11);
    assert!(second.enqueued.iter().all(|t| t.id != late));
    assert_eq!(second.paced, 1);

    let rest = poll(store, T0 + 3900).await;
    assert_eq!(
        count(&rest, "paced"),
        29,
        "the backlog's last slot is T0 + 3.9 s"
    );
    let last = poll(store, T0 + 4000).await;
    assert_eq!(last.enqueued.len(), 1);
    assert_eq!(last.enqueued[0].id, late);
}

/// Two consumers polling at once share the lambda's pace: together they
/// enqueue no more than one consumer would.
pub async fn concurrent_consumers_share_one_pace(store: &dyn TaskStore) {
    deploy_paced(store).await;
    let tasks = (0..100).map(|_| new_task("paced")).collect();
    store
        .task_insert_many(TaskInsertMany { tasks, now: T0 })
        .await
        .unwrap();
    let polls = (0..4).map(|_| {
        store.task_enqueue_ready(TaskEnqueueReady {
            now: T0,
            limit: 25,
            enqueue_timeout: ENQUEUE_TIMEOUT,
        })
    });
    let enqueued: usize = futures::future::join_all(polls)
        .await
        .into_iter()
        .map(|report| report.unwrap().enqueued.len())
        .sum();
    // A second's worth, or one more when a later poll already finds the
    // task whose slot is exactly T0.
    assert!((10..=11).contains(&enqueued), "{enqueued}");
    // Slots T0 - 1 s ..= T0 + 1 s, 100 ms apart: 21 by then, however many
    // consumers polled.
    let by_then = enqueued + poll(store, T0 + 1000).await.enqueued.len();
    assert_eq!(by_then, 21);
}

/// Several consumers poll at once and several claimers race for every
/// message: each task is enqueued by exactly one poll and claimed exactly
/// once.
pub async fn concurrent_consumers_and_claimers_never_double_up(store: &dyn TaskStore) {
    const TASKS: usize = 300;
    deploy(store, "mail").await;
    let tasks = (0..TASKS).map(|_| new_task("mail")).collect();
    store
        .task_insert_many(TaskInsertMany { tasks, now: T0 })
        .await
        .unwrap();

    let polls = (0..4).map(|_| async {
        let mut mine = Vec::new();
        loop {
            let report = store
                .task_enqueue_ready(TaskEnqueueReady {
                    now: T0,
                    limit: 16,
                    enqueue_timeout: ENQUEUE_TIMEOUT,
                })
                .await
                .unwrap();
            if report.enqueued.is_empty() {
                return mine;
            }
            mine.extend(report.enqueued);
        }
    });
    let enqueued: Vec<_> = futures::future::join_all(polls)
        .await
        .into_iter()
        .flatten()
        .collect();
    let mut ids: Vec<&str> = enqueued.iter().map(|t| t.id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(
        (enqueued.len(), ids.len()),
        (TASKS, TASKS),
        "each task enqueued exactly once"
    );

    let claims: Vec<(String, i64)> = enqueued
        .iter()
        .map(|t| (t.id.clone(), t.enqueue_token))
        .collect();
    let claimers = (0..8).map(|i| {
        let mut claims = claims.clone();
        // Each claimer walks the messages in its own order.
        claims.rotate_left(i * TASKS / 8);
        async move {
            let mut won = Vec::new();
            for chunk in claims.chunks(25) {
                let answers = store
                    .task_claim_many(TaskClaimMany {
                        claims: chunk.to_vec(),
                        now: T0,
                        claim_timeout: CLAIM_TIMEOUT,
                    })
                    .await
                    .unwrap();
                for ((id, _), answer) in chunk.iter().zip(answers) {
                    match answer {
                        Ok(claimed) => won.push((id.clone(), claimed.lease_token)),
                        Err(refusal) => {
                            assert_eq!(refusal, Refusal::WrongState(TaskStatus::Claimed))
                        }
                    }
                }
            }
            won
        }
    });
    let mut won: Vec<(String, i64)> = futures::future::join_all(claimers)
        .await
        .into_iter()
        .flatten()
        .collect();
    won.sort();
    let before = won.len();
    won.dedup_by(|a, b| a.0 == b.0);
    assert_eq!(
        (before, won.len()),
        (TASKS, TASKS),
        "each task claimed exactly once"
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
