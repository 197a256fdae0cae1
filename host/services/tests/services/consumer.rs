//! The Store Consumer on the embedded backends (a SQLite file, in-process
//! queues): due tasks reach the right queue, immediate ones without waiting
//! for a tick, and a failed send loses nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use waft_core::LambdaConfig;
use waft_queue::{Delivery, MemoryQueue, QueueError, QueueKey, QueueMessage, TaskQueue};
use waft_services::{Clock, ConsumerConfig, StoreConsumer, SystemClock};
use waft_store::{LambdaDeploy, Millis, NewTask, SqliteStore, TaskInsertMany, TaskStore};

const T0: Millis = 1_800_000_000_000;

struct ManualClock(AtomicI64);

impl Clock for ManualClock {
    fn now(&self) -> Millis {
        self.0.load(Ordering::SeqCst)
    }
}

async fn store(dir: &tempfile::TempDir, now: Millis) -> Arc<SqliteStore> {
    let store = SqliteStore::open(&dir.path().join("waft.db"))
        .await
        .unwrap();
    store
        .lambda_deploy(LambdaDeploy {
            name: "mail".into(),
            digest: "d".into(),
            component: vec![],
            artifact: None,
            config: LambdaConfig::default(),
            now,
        })
        .await
        .unwrap();
    Arc::new(store)
}

fn task(priority: u8, run_at: Option<Millis>) -> NewTask {
    NewTask {
        lambda: "mail".into(),
        priority: Some(priority),
        run_at,
        ..NewTask::default()
    }
}

async fn insert(store: &SqliteStore, tasks: Vec<NewTask>, now: Millis) -> Vec<String> {
    store
        .task_insert_many(TaskInsertMany { tasks, now })
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.id)
        .collect()
}

#[tokio::test]
async fn due_tasks_go_to_the_queue_of_their_priority() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir, T0).await;
    let queue = Arc::new(MemoryQueue::new(Duration::from_secs(30)));
    let clock = Arc::new(ManualClock(AtomicI64::new(T0)));
    let consumer = StoreConsumer::new(
        store.clone(),
        queue.clone(),
        clock.clone(),
        ConsumerConfig::default(),
    );
    let low = insert(&store, vec![task(0, None), task(0, None)], T0).await;
    let high = insert(&store, vec![task(2, None)], T0).await;
    let later = insert(&store, vec![task(0, Some(T0 + 5_000))], T0).await;

    let report = consumer.run_once().await.unwrap();
    assert_eq!((report.sent, report.unsent, report.full), (3, 0, false));
    let ids = |deliveries: Vec<Delivery>| {
        deliveries
            .into_iter()
            .map(|d| d.message.task_id)
            .collect::<Vec<_>>()
    };
    let got_low = queue
        .queue_receive(&QueueKey::new("mail", 0), 10, Duration::ZERO)
        .await
        .unwrap();
    let got_high = queue
        .queue_receive(&QueueKey::new("mail", 2), 10, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(ids(got_low), low);
    assert_eq!(ids(got_high), high);

    // The delayed task goes when it is due, not before.
    clock.0.store(T0 + 4_999, Ordering::SeqCst);
    assert_eq!(consumer.run_once().await.unwrap().sent, 0);
    clock.0.store(T0 + 5_000, Ordering::SeqCst);
    assert_eq!(consumer.run_once().await.unwrap().sent, 1);
    let got = queue
        .queue_receive(&QueueKey::new("mail", 0), 10, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(ids(got), later);
}

#[tokio::test]
async fn a_turn_that_fills_its_batch_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir, T0).await;
    let queue = Arc::new(MemoryQueue::new(Duration::from_secs(30)));
    let clock = Arc::new(ManualClock(AtomicI64::new(T0)));
    let config = ConsumerConfig {
        batch: 2,
        ..ConsumerConfig::default()
    };
    let consumer = StoreConsumer::new(store.clone(), queue, clock, config);
    insert(&store, (0..3).map(|_| task(0, None)).collect(), T0).await;
    assert!(consumer.run_once().await.unwrap().full);
    let last = consumer.run_once().await.unwrap();
    assert_eq!((last.sent, last.full), (1, false));
}

/// A queue service that is down until told otherwise.
struct FlakyQueue {
    down: AtomicBool,
    inner: MemoryQueue,
}

#[async_trait]
impl TaskQueue for FlakyQueue {
    async fn queue_send_many(
        &self,
        key: &QueueKey,
        messages: Vec<QueueMessage>,
    ) -> Result<(), QueueError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(QueueError::Service("connection refused".into()));
        }
        self.inner.queue_send_many(key, messages).await
    }
    async fn queue_receive(
        &self,
        key: &QueueKey,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Delivery>, QueueError> {
        self.inner.queue_receive(key, max, wait).await
    }
    async fn queue_ack_many(
        &self,
        key: &QueueKey,
        receipts: Vec<String>,
    ) -> Result<(), QueueError> {
        self.inner.queue_ack_many(key, receipts).await
    }
    async fn queue_depth(&self, key: &QueueKey) -> Result<u64, QueueError> {
        self.inner.queue_depth(key).await
    }
    async fn queue_delete(&self, key: &QueueKey) -> Result<(), QueueError> {
        self.inner.queue_delete(key).await
    }
}

#[tokio::test]
async fn a_failed_send_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir, T0).await;
    let queue = Arc::new(FlakyQueue {
        down: AtomicBool::new(true),
        inner: MemoryQueue::new(Duration::from_secs(30)),
    });
    let clock = Arc::new(ManualClock(AtomicI64::new(T0)));
    let config = ConsumerConfig {
        enqueue_timeout: Duration::from_secs(60),
        ..ConsumerConfig::default()
    };
    let consumer = StoreConsumer::new(store.clone(), queue.clone(), clock.clone(), config);
    let id = insert(&store, vec![task(1, None)], T0).await;

    let report = consumer.run_once().await.unwrap();
    assert_eq!((report.sent, report.unsent), (0, 1));
    queue.down.store(false, Ordering::SeqCst);
    // Marked enqueued, so not taken again before the enqueue timeout...
    assert_eq!(consumer.run_once().await.unwrap().sent, 0);
    // ...and taken again once it passes.
    clock.0.store(T0 + 60_000, Ordering::SeqCst);
    assert_eq!(consumer.run_once().await.unwrap().sent, 1);
    let got = queue
        .queue_receive(&QueueKey::new("mail", 1), 10, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(got[0].message.task_id, id[0]);
    assert_eq!(
        got[0].message.enqueue_token, 2,
        "a new token for the second enqueue"
    );
}

#[tokio::test]
async fn waking_the_consumer_sends_an_immediate_task_without_waiting_for_the_tick() {
    let dir = tempfile::tempdir().unwrap();
    let now = SystemClock.now();
    let store = store(&dir, now).await;
    let queue = Arc::new(MemoryQueue::new(Duration::from_secs(30)));
    // A tick so long that only a wake can explain a quick delivery.
    let (consumer, stop, running) = punctual_consumer(store.clone(), queue.clone());
    let wake = consumer.waker();
    // Let the first turn (an empty one) pass, so the consumer sleeps.
    tokio::time::sleep(Duration::from_millis(100)).await;

    let started = Instant::now();
    let id = insert(&store, vec![task(0, None)], SystemClock.now()).await;
    wake.wake();
    let got = queue
        .queue_receive(&QueueKey::new("mail", 0), 10, Duration::from_secs(10))
        .await
        .unwrap();
    assert!(
        !got.is_empty(),
        "not delivered within 10 s of the wake (the tick is an hour)"
    );
    assert_eq!(got[0].message.task_id, id[0]);
    println!("delivered {:?} after the insert", started.elapsed());
    let _ = stop.send(());
    running.await.unwrap();
}

/// A consumer with an hour-long tick, running until the returned sender
/// fires: only a wake or the due times it learns can explain a punctual
/// delivery.
fn punctual_consumer(
    store: Arc<SqliteStore>,
    queue: Arc<MemoryQueue>,
) -> (
    Arc<StoreConsumer>,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let config = ConsumerConfig {
        poll_interval: Duration::from_secs(3600),
        ..ConsumerConfig::default()
    };
    let consumer = Arc::new(StoreConsumer::new(
        store,
        queue,
        Arc::new(SystemClock),
        config,
    ));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = {
        let consumer = consumer.clone();
        tokio::spawn(async move {
            consumer
                .run(async {
                    let _ = stopped.await;
                })
                .await;
        })
    };
    (consumer, stop, running)
}

/// How late each task reached its queue after its due time, in ms.
async fn lateness(queue: &MemoryQueue, due: &[(String, Millis)]) -> Vec<Millis> {
    let mut late = Vec::new();
    while late.len() < due.len() {
        let got = queue
            .queue_receive(&QueueKey::new("mail", 0), 10, Duration::from_secs(10))
            .await
            .unwrap();
        assert!(
            !got.is_empty(),
            "a delayed task never came (the tick is an hour)"
        );
        let now = SystemClock.now();
        for delivery in got {
            let (_, at) = due
                .iter()
                .find(|(id, _)| *id == delivery.message.task_id)
                .unwrap();
            assert!(now >= *at, "delivered {} ms early", at - now);
            late.push(now - at);
        }
    }
    late
}

#[tokio::test]
async fn delayed_tasks_stored_before_a_turn_are_sent_when_they_come_due() {
    let dir = tempfile::tempdir().unwrap();
    let now = SystemClock.now();
    let store = store(&dir, now).await;
    let queue = Arc::new(MemoryQueue::new(Duration::from_secs(30)));
    // Stored behind the consumer's back, nobody signalling: it learns the
    // first due time from the store at the end of its first turn, the
    // second at the end of the turn that sends the first.
    let mut due = Vec::new();
    for delay in [300, 600] {
        let id = insert(&store, vec![task(0, Some(now + delay))], now).await;
        due.push((id[0].clone(), now + delay));
    }
    let (_consumer, stop, running) = punctual_consumer(store, queue.clone());
    let late = lateness(&queue, &due).await;
    assert!(late.iter().all(|&ms| ms < 100), "{late:?} ms late");
    let _ = stop.send(());
    running.await.unwrap();
}

#[tokio::test]
async fn a_signalled_due_time_wakes_the_consumer_for_a_delayed_task() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir, SystemClock.now()).await;
    let queue = Arc::new(MemoryQueue::new(Duration::from_secs(30)));
    let (consumer, stop, running) = punctual_consumer(store.clone(), queue.clone());
    // Let the first turn (an empty one) pass, so the consumer sleeps.
    tokio::time::sleep(Duration::from_millis(100)).await;

    // Stored after the turn: only the signal (what the Frontend sends) can
    // tell the sleeping consumer.
    let now = SystemClock.now();
    let at = now + 300;
    let id = insert(&store, vec![task(0, Some(at))], now).await;
    consumer.waker().wake_at(at);
    let late = lateness(&queue, &[(id[0].clone(), at)]).await;
    assert!(late[0] < 100, "{late:?} ms late");
    let _ = stop.send(());
    running.await.unwrap();
}
