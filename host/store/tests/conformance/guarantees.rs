//! The promises on the paths a crash soak never takes (gates acting on
//! queued and running tasks are `gate_guarantees.rs`): cancel racing a
//! result, any byte a string may
//! hold, attempts that count once an execution may have run, bounded
//! delays, reserved idempotency keys, children of other lambdas only by
//! grant, periodic schedules whose task can no longer be created.
//!
//! Several checks race operations on one task from concurrent callers: on
//! Postgres they run at READ COMMITTED on separate connections, which is
//! where a read followed by an unguarded write loses.

use std::time::Duration;

use waft_core::{Backoff, LambdaConfig, TaskStatus};
use waft_store::{
    AttemptOutcome, Continuation, Cron, CronMaterialize, Materialized, NewTask, ResultOutcome,
    StoreError, TaskInsertMany, TaskStore, Token, TokenCreate, TokenRole,
};

use crate::support::{
    CLAIM_TIMEOUT, T0, claim, config, deploy, deploy_with, finish, heartbeat, insert, new_task,
    poll, start, status, success,
};

/// Cancel and a result race on one running task: exactly one wins. A
/// cancelled task stays cancelled, and a success is never overwritten.
pub async fn cancel_and_results_race_atomically(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    for round in 0..40i64 {
        let now = T0 + round * 100;
        let id = insert(store, new_task("mail"), now).await;
        let lease = start(store, &id, now).await;
        let outcome = if round % 2 == 0 {
            ResultOutcome::Retriable {
                error: "again".into(),
                retry_after: None,
            }
        } else {
            success()
        };
        let (cancelled, result) = tokio::join!(store.task_cancel(&id, now + 1), async {
            finish(store, &id, lease, outcome, now + 1).await
        });
        let task = store.task_get(&id).await.unwrap().unwrap();
        match (&cancelled, &result) {
            (Ok(_), Ok(TaskStatus::Success)) => {
                panic!("both the cancel and the success were accepted: {task:?}")
            }
            (Ok(_), _) => assert_eq!(task.status, TaskStatus::Cancelled, "{result:?}"),
            (Err(StoreError::AlreadyEnded { .. }), Ok(ended)) => {
                assert_eq!(task.status, *ended)
            }
            other => panic!("unexpected answers {other:?}"),
        }
        assert!(task.next_trigger_at.is_none() || !task.status.is_terminal());
        if cancelled.is_ok() && result.is_ok() {
            // The retry landed first; the history holds it under its lease.
            let attempts = store.attempt_list(&id).await.unwrap();
            assert_eq!(attempts.len(), 1);
            assert_eq!(attempts[0].lease_token, lease);
        }
    }
}

/// Cancel never overwrites a task that ended meanwhile.
pub async fn cancel_leaves_ended_tasks_alone(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    for outcome in [success(), ResultOutcome::Fatal { error: "no".into() }] {
        let id = insert(store, new_task("mail"), T0).await;
        let lease = start(store, &id, T0).await;
        let ended = finish(store, &id, lease, outcome, T0 + 1).await.unwrap();
        assert!(matches!(
            store.task_cancel(&id, T0 + 2).await,
            Err(StoreError::AlreadyEnded { .. })
        ));
        assert_eq!(status(store, &id).await, ended);
    }
}

/// A string with every awkward character a Rust string may hold.
pub const AWKWARD: &str = "nul\0 backslash\\0 \\\\ quote\" 'sq' \u{1} \u{7f} é 🦀 \r\n\t end\0";

/// Any byte a Rust string may hold round-trips through every free-text
/// field, and one result holding NUL does not sink the rest of its batch.
pub async fn any_string_round_trips(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let key = format!("key {AWKWARD}");
    let id = insert(
        store,
        NewTask {
            idempotency_key: Some(key.clone()),
            payload: AWKWARD.as_bytes().to_vec(),
            ..new_task("mail")
        },
        T0,
    )
    .await;
    let again = insert(
        store,
        NewTask {
            idempotency_key: Some(key.clone()),
            ..new_task("mail")
        },
        T0,
    )
    .await;
    assert_eq!(again, id, "the key is found again");
    let other = insert(store, new_task("mail"), T0).await;
    let queued = poll(store, T0).await.enqueued;
    let mut leases = Vec::new();
    for task in &queued {
        let lease = claim(store, &task.id, task.enqueue_token, T0)
            .await
            .unwrap()
            .lease_token;
        leases.push((task.id.clone(), lease));
    }
    let lease_of = |id: &str| leases.iter().find(|(i, _)| i == id).unwrap().1;
    heartbeat(store, &id, lease_of(&id), Some(AWKWARD), T0 + 1)
        .await
        .unwrap();
    let task = store.task_get(&id).await.unwrap().unwrap();
    assert_eq!(task.progress.as_deref(), Some(AWKWARD));
    assert_eq!(task.idempotency_key.as_deref(), Some(key.as_str()));
    assert_eq!(task.payload, AWKWARD.as_bytes());

    let answers = store
        .task_set_result_many(waft_store::TaskSetResultMany {
            results: vec![
                waft_store::TaskResult {
                    id: id.clone(),
                    lease_token: lease_of(&id),
                    outcome: ResultOutcome::Retriable {
                        error: AWKWARD.into(),
                        retry_after: None,
                    },
                    log: Some(AWKWARD.into()),
                    journal: None,
                    replayed: 0,
                },
                waft_store::TaskResult {
                    id: other.clone(),
                    lease_token: lease_of(&other),
                    outcome: ResultOutcome::Fatal {
                        error: AWKWARD.into(),
                    },
                    log: Some(AWKWARD.into()),
                    journal: None,
                    replayed: 0,
                },
            ],
            now: T0 + 2,
        })
        .await
        .unwrap();
    assert_eq!(
        answers,
        [
            Ok(TaskStatus::RetriableFailure),
            Ok(TaskStatus::FatalFailure)
        ]
    );
    for id in [&id, &other] {
        let task = store.task_get(id).await.unwrap().unwrap();
        assert_eq!(task.last_error.as_deref(), Some(AWKWARD));
        assert_eq!(task.log.as_deref(), Some(AWKWARD));
        let attempts = store.attempt_list(id).await.unwrap();
        assert_eq!(attempts[0].error.as_deref(), Some(AWKWARD));
        assert_eq!(attempts[0].log.as_deref(), Some(AWKWARD));
    }
    // Success with output bytes of every value.
    let output: Vec<u8> = (0..=255).collect();
    let third = insert(store, new_task("mail"), T0).await;
    let lease = start(store, &third, T0 + 3).await;
    finish(
        store,
        &third,
        lease,
        ResultOutcome::Success {
            output: Some(output.clone()),
        },
        T0 + 4,
    )
    .await
    .unwrap();
    let task = store.task_get(&third).await.unwrap().unwrap();
    assert_eq!(task.output, Some(output));

    // Lookups with such strings find nothing, and fail nothing.
    assert!(store.task_get(AWKWARD).await.unwrap().is_none());
    assert!(matches!(
        store.task_cancel(AWKWARD, T0).await,
        Err(StoreError::TaskNotFound(_))
    ));
    assert!(store.attempt_list(AWKWARD).await.unwrap().is_empty());
    assert!(store.lambda_get(AWKWARD).await.unwrap().is_none());
    assert!(store.token_find(AWKWARD).await.unwrap().is_none());
    assert!(!store.token_revoke(AWKWARD, T0).await.unwrap());
    assert!(!store.cron_delete(AWKWARD).await.unwrap());
    assert!(store.component_get(AWKWARD).await.unwrap().is_none());
    let listed = store
        .task_list(waft_store::TaskList {
            lambda: Some(AWKWARD.into()),
            collection: Some(AWKWARD.into()),
            parent_id: Some(AWKWARD.into()),
            after: Some(AWKWARD.into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(listed.is_empty());

    // Token names too.
    let token = Token {
        id: "tok".into(),
        name: AWKWARD.into(),
        role: TokenRole::Admin,
        lambdas: vec![],
        created_at: T0,
        revoked_at: None,
    };
    store
        .token_create(TokenCreate {
            token: token.clone(),
            hash: "h".into(),
        })
        .await
        .unwrap();
    assert_eq!(store.token_find("h").await.unwrap(), Some(token));
}

/// A claim whose executor never reports may have run the task (a poison
/// task that crashes its executor does exactly that): its expiry costs the
/// attempt, and the last one is dead.
pub async fn an_expired_claim_costs_its_attempt(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let id = insert(store, new_task("mail"), T0).await;
    let mut token = poll(store, T0).await.enqueued[0].enqueue_token;
    let mut now = T0;
    for attempt in 1..=3 {
        let claimed = claim(store, &id, token, now).await.unwrap();
        assert_eq!(claimed.attempt, attempt);
        now += CLAIM_TIMEOUT.as_millis() as i64;
        let report = poll(store, now).await;
        if attempt < 3 {
            assert_eq!(report.enqueued.len(), 1);
            token = report.enqueued[0].enqueue_token;
        } else {
            assert_eq!((report.enqueued.len(), report.dead), (0, 1));
        }
    }
    assert_eq!(status(store, &id).await, TaskStatus::Dead);
    let outcomes: Vec<_> = store
        .attempt_list(&id)
        .await
        .unwrap()
        .iter()
        .map(|a| (a.attempt, a.outcome))
        .collect();
    assert_eq!(
        outcomes,
        [
            (1, AttemptOutcome::Lost),
            (2, AttemptOutcome::Lost),
            (3, AttemptOutcome::Lost)
        ]
    );
}

/// A retry delay from the lambda is bounded: the task comes due again and
/// is neither stranded at the end of time nor lost.
pub async fn retry_delays_are_bounded(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let id = insert(store, new_task("mail"), T0).await;
    let lease = start(store, &id, T0).await;
    let answer = finish(
        store,
        &id,
        lease,
        ResultOutcome::Retriable {
            error: "later".into(),
            retry_after: Some(Duration::MAX),
        },
        T0 + 1,
    )
    .await;
    assert_eq!(answer, Ok(TaskStatus::RetriableFailure));
    let next = store
        .task_get(&id)
        .await
        .unwrap()
        .unwrap()
        .next_trigger_at
        .unwrap();
    let bound = waft_core::MAX_RETRY_DELAY.as_millis() as i64;
    assert!(next > T0 && next <= T0 + 1 + bound, "due at {next}");
    assert_eq!(poll(store, next).await.enqueued.len(), 1);

    // A backoff without bound is refused at deploy.
    let unbounded = LambdaConfig {
        backoff: Backoff {
            max: Duration::MAX,
            ..config().backoff
        },
        ..config()
    };
    let refused = store
        .lambda_deploy(waft_store::LambdaDeploy {
            name: "unbounded".into(),
            digest: "d".into(),
            component: vec![1],
            artifact: None,
            config: unbounded,
            now: T0,
        })
        .await;
    assert!(
        matches!(refused, Err(StoreError::InvalidConfig(_))),
        "{refused:?}"
    );
}

/// A quota lowered to a trickle paces tasks far ahead; raising it again
/// releases them at the new rate, at the next poll.
pub async fn raising_a_quota_releases_paced_tasks(store: &dyn TaskStore) {
    let slow = LambdaConfig {
        quota_per_sec: Some(0.01),
        ..config()
    };
    deploy_with(store, "paced", slow).await;
    let tasks = (0..10).map(|_| new_task("paced")).collect();
    store
        .task_insert_many(TaskInsertMany { tasks, now: T0 })
        .await
        .unwrap();
    let first = poll(store, T0).await;
    assert!(first.enqueued.len() <= 1 && first.paced >= 9, "{first:?}");
    let fast = LambdaConfig {
        quota_per_sec: Some(1000.0),
        ..config()
    };
    deploy_with(store, "paced", fast).await;
    let released = poll(store, T0 + 1).await;
    assert_eq!(
        released.enqueued.len() + first.enqueued.len(),
        10,
        "{released:?}"
    );
}

/// The idempotency-key prefixes the platform writes itself (a
/// continuation's, a periodic occurrence's, a child's) are refused from
/// clients: nobody may pre-empt a continuation or suppress an occurrence.
pub async fn reserved_idempotency_keys_are_refused(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let parent = insert(store, new_task("mail"), T0).await;
    for key in [
        format!("then:{parent}"),
        "cron:s1:1800000000000".to_owned(),
        format!("child:{parent}:0"),
    ] {
        let refused = store
            .task_insert_many(TaskInsertMany {
                tasks: vec![NewTask {
                    idempotency_key: Some(key.clone()),
                    ..new_task("mail")
                }],
                now: T0,
            })
            .await;
        assert!(
            matches!(refused, Err(StoreError::Invalid(_))),
            "{key}: {refused:?}"
        );
    }
    // A running parent's own children use its prefix.
    let lease = start(store, &parent, T0).await;
    let child = NewTask {
        idempotency_key: Some(format!("child:{parent}:0")),
        parent_id: Some(parent.clone()),
        parent_lease: Some(lease),
        ..new_task("mail")
    };
    store
        .task_insert_many(TaskInsertMany {
            tasks: vec![child.clone()],
            now: T0,
        })
        .await
        .unwrap();
    // But not another task's.
    let other = insert(store, new_task("mail"), T0).await;
    let stolen = NewTask {
        idempotency_key: Some(format!("child:{other}:0")),
        ..child
    };
    assert!(matches!(
        store
            .task_insert_many(TaskInsertMany {
                tasks: vec![stolen],
                now: T0
            })
            .await,
        Err(StoreError::Invalid(_))
    ));
}

/// A running execution schedules children of its own lambda, and of
/// another lambda only while its lambda's current version allows it:
/// refused with nothing written, allowed after a deploy that grants it, and
/// refused again after one that takes the grant back.
pub async fn children_of_other_lambdas_need_a_grant(store: &dyn TaskStore) {
    deploy(store, "chain").await;
    deploy(store, "billing").await;
    let parent = insert(store, new_task("chain"), T0).await;
    let lease = start(store, &parent, T0).await;
    let child = |lambda: &str| NewTask {
        parent_id: Some(parent.clone()),
        parent_lease: Some(lease),
        ..new_task(lambda)
    };
    let schedule = |lambda: &'static str| {
        let task = child(lambda);
        async move {
            store
                .task_insert_many(TaskInsertMany {
                    tasks: vec![task],
                    now: T0,
                })
                .await
        }
    };
    schedule("chain").await.unwrap();
    let refused = schedule("billing").await;
    assert!(
        matches!(&refused, Err(StoreError::ChildNotAllowed { parent_lambda, child_lambda })
            if parent_lambda == "chain" && child_lambda == "billing"),
        "{refused:?}"
    );
    let granted = LambdaConfig {
        allowed_children: vec!["billing".into()],
        ..config()
    };
    deploy_with(store, "chain", granted).await;
    assert_eq!(
        store
            .lambda_get("chain")
            .await
            .unwrap()
            .unwrap()
            .config
            .allowed_children,
        ["billing"]
    );
    schedule("billing").await.unwrap();
    deploy(store, "chain").await;
    assert!(matches!(
        schedule("billing").await,
        Err(StoreError::ChildNotAllowed { .. })
    ));
    let children = store
        .task_list(waft_store::TaskList {
            parent_id: Some(parent.clone()),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut lambdas: Vec<_> = children.iter().map(|t| t.lambda.as_str()).collect();
    lambdas.sort_unstable();
    assert_eq!(lambdas, ["billing", "chain"]);
}

/// A periodic schedule whose task can no longer be created (its lambda
/// redeployed with a smaller payload limit) skips the occurrence and moves
/// on, instead of blocking every schedule behind it.
pub async fn a_cron_whose_task_is_refused_moves_on(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    store
        .cron_create(Cron {
            id: "s1".into(),
            lambda: "mail".into(),
            cron: "* * * * *".into(),
            timezone: "UTC".into(),
            payload: vec![b'x'; 100],
            collection: None,
            key: None,
            priority: None,
            catch_up: true,
            next_at: T0,
            created_at: T0,
        })
        .await
        .unwrap();
    let small = LambdaConfig {
        max_payload: waft_core::ByteSize::b(10),
        ..config()
    };
    deploy_with(store, "mail", small).await;
    let answer = store
        .cron_materialize(CronMaterialize {
            cron_id: "s1".into(),
            expected: T0,
            occurrence: T0,
            next_at: T0 + 60_000,
            now: T0,
        })
        .await
        .unwrap();
    assert!(
        matches!(answer, Materialized::Skipped(ref why) if why.contains("payload")),
        "{answer:?}"
    );
    let schedules = store.cron_due(T0, 10).await.unwrap();
    assert!(schedules.is_empty(), "the schedule moved on: {schedules:?}");
    assert_eq!(store.cron_list().await.unwrap()[0].next_at, T0 + 60_000);
}

/// The store still writes a continuation under its own reserved key
/// (`then:TASK`), which clients are refused.
pub async fn continuations_keep_their_key(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    deploy(store, "next").await;
    let id = insert(
        store,
        NewTask {
            continuation: Some(Continuation {
                lambda: "next".into(),
                ..Continuation::default()
            }),
            ..new_task("mail")
        },
        T0,
    )
    .await;
    let lease = start(store, &id, T0).await;
    finish(store, &id, lease, success(), T0 + 1).await.unwrap();
    let children = store
        .task_list(waft_store::TaskList {
            parent_id: Some(id.clone()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(children.len(), 1);
    assert_eq!(
        children[0].idempotency_key.as_deref(),
        Some(format!("then:{id}").as_str())
    );
}

/// The store's clock, which the roles' lease arithmetic follows, reads as
/// Unix milliseconds (the database server runs on this host in the tests,
/// so it agrees with this host's clock) and does not stand still within a
/// transaction's snapshot.
pub async fn the_store_clock_reads_unix_milliseconds(store: &dyn TaskStore) {
    let host = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    };
    let before = host();
    let first = store.clock_now().await.unwrap();
    let after = host();
    assert!(
        (before - 5..=after + 5).contains(&first),
        "{first} not within {before}..={after}"
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    let second = store.clock_now().await.unwrap();
    assert!(second >= first + 15, "{first} then {second}");
}
