//! The task history as the roles keep it, on a SQLite store: the HSC counts
//! claims' latency (first executions only) and results' outcomes under
//! their lambda and minute, in memory, until a flush adds them; a store
//! that refuses a flush loses nothing; the pruner's holder samples each
//! lambda's queue depth once a minute and deletes minutes past the
//! history's retention.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use waft_core::LambdaConfig;
use waft_services::{Clock, HeartbeatConfig, Hsc, HscApi, Pruner, RetentionConfig};
use waft_store::{
    HistoryAdd, HistoryRead, LambdaDeploy, MINUTE, Millis, MinuteCounts, NewTask, ResultOutcome,
    SqliteStore, TaskEnqueueReady, TaskInsertMany, TaskResult, TaskStore,
};

const T0: Millis = 1_800_000_000_000;

struct ManualClock(AtomicI64);

impl Clock for ManualClock {
    fn now(&self) -> Millis {
        self.0.load(Ordering::SeqCst)
    }
}

async fn store() -> (Arc<dyn TaskStore>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn TaskStore> = Arc::new(
        SqliteStore::open(&dir.path().join("waft.db"))
            .await
            .unwrap(),
    );
    for name in ["mail", "pdf"] {
        store
            .lambda_deploy(LambdaDeploy {
                name: name.into(),
                digest: format!("d-{name}"),
                component: vec![],
                artifact: None,
                config: LambdaConfig {
                    max_attempts: 1,
                    ..LambdaConfig::default()
                },
                now: T0,
            })
            .await
            .unwrap();
    }
    (store, dir)
}

async fn schedule(store: &dyn TaskStore, lambda: &str, n: usize, at: Millis) {
    let tasks = (0..n)
        .map(|_| NewTask {
            lambda: lambda.into(),
            payload: b"{}".to_vec(),
            ..NewTask::default()
        })
        .collect();
    store
        .task_insert_many(TaskInsertMany { tasks, now: at })
        .await
        .unwrap();
}

async fn minutes(store: &dyn TaskStore, lambda: Option<&str>) -> Vec<waft_store::HistoryMinute> {
    store
        .history_read(HistoryRead {
            lambda: lambda.map(Into::into),
            from: T0 - 120 * MINUTE,
            to: T0 + 120 * MINUTE,
        })
        .await
        .unwrap()
}

#[tokio::test]
async fn the_hsc_counts_latency_and_outcomes_until_a_flush_adds_them() {
    let (store, _dir) = store().await;
    let clock = Arc::new(ManualClock(AtomicI64::new(T0)));
    let hsc = Hsc::new(store.clone(), clock.clone(), HeartbeatConfig::default());
    schedule(&*store, "mail", 3, T0).await;
    let polled = store
        .task_enqueue_ready(TaskEnqueueReady {
            now: T0,
            limit: 10,
            enqueue_timeout: Duration::from_secs(60),
        })
        .await
        .unwrap();
    // Claimed 1.5 s after they were due.
    clock.0.store(T0 + 1_500, Ordering::SeqCst);
    let claims = polled
        .enqueued
        .iter()
        .map(|t| (t.id.clone(), t.enqueue_token))
        .collect();
    let claimed: Vec<_> = hsc
        .task_claim_many(claims)
        .await
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let outcomes = [
        ResultOutcome::Success { output: None },
        ResultOutcome::Success { output: None },
        ResultOutcome::Retriable {
            error: "down".into(),
            retry_after: None,
        },
    ];
    let results = claimed
        .iter()
        .zip(outcomes)
        .map(|(task, outcome)| TaskResult {
            id: task.id.clone(),
            lease_token: task.lease_token,
            outcome,
            log: None,
            journal: None,
            replayed: 0,
        })
        .collect::<Vec<_>>();
    // A stale repeat of the first result is refused, and not counted.
    let mut with_repeat = results.clone();
    with_repeat.push(results[0].clone());
    clock.0.store(T0 + MINUTE + 10, Ordering::SeqCst);
    hsc.task_set_result_many(with_repeat).await.unwrap();
    assert!(
        minutes(&*store, None).await.is_empty(),
        "nothing before a flush"
    );

    hsc.history().flush().await.unwrap();
    let mail = minutes(&*store, Some("mail")).await;
    assert_eq!(mail.len(), 2, "the claims' minute and the results' minute");
    assert_eq!(mail[0].minute, T0);
    assert_eq!(mail[0].latency.total(), 3);
    let p50 = mail[0].latency.quantile(0.5).unwrap();
    assert!((1024.0..2048.0).contains(&p50), "p50 {p50}");
    assert_eq!(mail[1].minute, T0 + MINUTE);
    assert_eq!(
        (mail[1].succeeded, mail[1].failed, mail[1].dead),
        (2, 1, 1),
        "the failure was its task's last attempt"
    );
    // Flushed counts are not added twice.
    hsc.history().flush().await.unwrap();
    assert_eq!(minutes(&*store, Some("mail")).await, mail);
}

#[tokio::test]
async fn the_pruners_holder_samples_depth_once_a_minute_and_deletes_old_minutes() {
    let (store, _dir) = store().await;
    let clock = Arc::new(ManualClock(AtomicI64::new(T0 + 5_000)));
    let config = RetentionConfig {
        history: Duration::from_secs(3600),
        ..RetentionConfig::default()
    };
    let pruner = Pruner::new(store.clone(), clock.clone(), config);
    store
        .history_add(HistoryAdd {
            minutes: vec![MinuteCounts {
                lambda: "mail".into(),
                minute: T0 - 61 * MINUTE,
                succeeded: 1,
                ..MinuteCounts::default()
            }],
        })
        .await
        .unwrap();
    schedule(&*store, "mail", 4, T0).await;
    schedule(&*store, "pdf", 2, T0 + 60 * MINUTE).await;
    pruner.run_once(&CancellationToken::new()).await.unwrap();
    let all = minutes(&*store, None).await;
    assert_eq!(all.len(), 1, "the minute past an hour is gone");
    assert_eq!((all[0].minute, all[0].depth), (T0, Some(4)));
    let pdf = minutes(&*store, Some("pdf")).await;
    assert_eq!(pdf[0].depth, Some(0), "not due yet: a deployed lambda at 0");

    // Within the minute, no second sample; the next minute has its own.
    schedule(&*store, "mail", 1, T0).await;
    pruner.run_once(&CancellationToken::new()).await.unwrap();
    assert_eq!(minutes(&*store, Some("mail")).await[0].depth, Some(4));
    clock.0.store(T0 + MINUTE, Ordering::SeqCst);
    pruner.run_once(&CancellationToken::new()).await.unwrap();
    let mail = minutes(&*store, Some("mail")).await;
    assert_eq!(mail[1].depth, Some(5));
}
