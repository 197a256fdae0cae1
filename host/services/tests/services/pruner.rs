//! The pruner on a SQLite store: it deletes what is past its retention in
//! bounded batches until none is left, and while one pruner holds the duty
//! another deletes nothing, until the holder's lease lapses. It deletes a
//! deleted lambda's queues.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use waft_core::LambdaConfig;
use waft_core::retention::Keep;
use waft_queue::{MemoryQueue, QueueKey, QueueMessage, TaskQueue};
use waft_services::pruner::BEHIND;
use waft_services::{Clock, Pruner, RetentionConfig};
use waft_store::{
    LambdaDelete, LambdaDeploy, Millis, NewTask, SqliteStore, TaskInsertMany, TaskStore,
};

const T0: Millis = 1_800_000_000_000;
const HOUR: Millis = 3_600_000;

struct ManualClock(AtomicI64);

impl Clock for ManualClock {
    fn now(&self) -> Millis {
        self.0.load(Ordering::SeqCst)
    }
}

/// `n` tasks of `mail`, cancelled at `at`.
async fn cancelled(store: &dyn TaskStore, n: usize, at: Millis) -> Vec<String> {
    let tasks = (0..n)
        .map(|_| NewTask {
            lambda: "mail".into(),
            payload: b"{}".to_vec(),
            ..NewTask::default()
        })
        .collect();
    let inserted = store
        .task_insert_many(TaskInsertMany { tasks, now: at })
        .await
        .unwrap();
    let mut ids = Vec::new();
    for task in inserted {
        store.task_cancel(&task.id, at).await.unwrap();
        ids.push(task.id);
    }
    ids
}

async fn deploy(store: &dyn TaskStore, name: &str) {
    store
        .lambda_deploy(LambdaDeploy {
            name: name.into(),
            digest: "d".into(),
            component: vec![],
            artifact: None,
            config: LambdaConfig::default(),
            now: T0,
        })
        .await
        .unwrap();
}

async fn sqlite(dir: &tempfile::TempDir) -> Arc<dyn TaskStore> {
    Arc::new(
        SqliteStore::open(&dir.path().join("waft.db"))
            .await
            .unwrap(),
    )
}

#[tokio::test]
async fn one_pruner_at_a_time_deletes_everything_past_its_retention() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite(&dir).await;
    deploy(&*store, "mail").await;
    let config = RetentionConfig {
        cancelled: Keep::For(Duration::from_secs(3600)),
        batch: 2,
        interval: Duration::from_secs(10),
        ..RetentionConfig::default()
    };
    let clock = Arc::new(ManualClock(AtomicI64::new(T0)));
    let first = Pruner::new(store.clone(), clock.clone(), config.clone());
    let second = Pruner::new(store.clone(), clock.clone(), config);
    let stop = CancellationToken::new();

    let old = cancelled(&*store, 5, T0).await;
    let recent = cancelled(&*store, 1, T0 + HOUR).await;
    clock.0.store(T0 + HOUR + 1, Ordering::SeqCst);
    assert_eq!(
        first.run_once(&stop).await.unwrap(),
        5,
        "three batches, to the end"
    );
    for id in &old {
        assert!(store.task_get(id).await.unwrap().is_none());
    }
    assert!(store.task_get(&recent[0]).await.unwrap().is_some());

    cancelled(&*store, 3, T0).await;
    assert_eq!(
        second.run_once(&stop).await.unwrap(),
        0,
        "the first holds the duty"
    );
    clock.0.fetch_add(30_001, Ordering::SeqCst);
    assert_eq!(second.run_once(&stop).await.unwrap(), 3, "its lease lapsed");
    assert_eq!(first.run_once(&stop).await.unwrap(), 0, "now the second's");
}

#[tokio::test]
async fn a_deleted_lambdas_queues_are_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite(&dir).await;
    let queue = Arc::new(MemoryQueue::new(Duration::from_secs(30)));
    let message = || QueueMessage {
        task_id: "t".into(),
        enqueue_token: 1,
        traceparent: None,
        tracestate: None,
        turn: None,
    };
    let keys = [
        QueueKey::new("mail", 0),
        QueueKey::new("mail", 15),
        QueueKey::new("other", 0),
    ];
    for key in &keys {
        deploy(&*store, &key.lambda).await;
        queue.queue_send_many(key, vec![message()]).await.unwrap();
    }
    store
        .lambda_delete(LambdaDelete {
            name: "mail".into(),
            drop_tasks: false,
        })
        .await
        .unwrap();
    let clock = Arc::new(ManualClock(AtomicI64::new(T0)));
    let pruner =
        Pruner::new(store.clone(), clock, RetentionConfig::default()).with_queue(queue.clone());
    pruner.run_once(&CancellationToken::new()).await.unwrap();
    let mut depths = Vec::new();
    for key in &keys {
        depths.push(queue.queue_depth(key).await.unwrap());
    }
    assert_eq!(depths, [0, 0, 1], "mail's queues went, other's stayed");
    assert!(store.queue_retired(10).await.unwrap().is_empty());
}

/// The pruner yields to the pipeline while a due task has waited to start
/// longer than `BEHIND`, and goes back to its pace once none does.
#[tokio::test]
async fn the_pipeline_is_behind_while_a_due_task_waits() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite(&dir).await;
    deploy(&*store, "mail").await;
    let clock = Arc::new(ManualClock(AtomicI64::new(T0)));
    let pruner = Pruner::new(store.clone(), clock.clone(), RetentionConfig::default());
    assert!(!pruner.behind().await.unwrap(), "nothing waits");

    let waiting = store
        .task_insert_many(TaskInsertMany {
            tasks: vec![NewTask {
                lambda: "mail".into(),
                payload: b"{}".to_vec(),
                ..NewTask::default()
            }],
            now: T0,
        })
        .await
        .unwrap();
    clock.0.store(T0 + BEHIND, Ordering::SeqCst);
    assert!(
        !pruner.behind().await.unwrap(),
        "due for no longer than BEHIND"
    );
    clock.0.store(T0 + BEHIND + 1, Ordering::SeqCst);
    assert!(pruner.behind().await.unwrap(), "due for longer");

    store
        .task_cancel(&waiting[0].id, T0 + BEHIND + 1)
        .await
        .unwrap();
    assert!(!pruner.behind().await.unwrap(), "it ended");
}
