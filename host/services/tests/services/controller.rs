//! The Controller on the embedded backends (a SQLite file, in-process
//! queues, the real HSC): highest priority first from bounded per-priority
//! buffers, claims before handing out, refused claims never handed out; a
//! queue polled when the consumer fills it or the sweep finds a backlog in
//! it, and left alone otherwise.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;
use waft_core::LambdaConfig;
use waft_queue::{Delivery, MemoryQueue, QueueError, QueueKey, QueueMessage, TaskQueue};
use waft_services::{
    Clock, ConsumerConfig, Controller, ControllerApi, ControllerConfig, Fills, Frontend,
    FrontendApi, HeartbeatConfig, Hsc, LambdaSlots, NextWork, ServiceError, StoreConsumer,
    SystemClock, Wake,
};
use waft_store::{NewTask, TaskInsertMany, TaskStore};

use crate::support;

struct Setup {
    store: Arc<dyn TaskStore>,
    queue: Arc<Counting>,
    consumer: StoreConsumer,
    controller: Controller,
    stop: CancellationToken,
    _dir: tempfile::TempDir,
}

/// How a test's installation differs.
struct Options {
    served: Vec<String>,
    /// Whether the consumer's fills reach the Controller (through the
    /// Frontend); without them only the sweep finds messages.
    fills: bool,
    sweep: Duration,
    receive_wait: Duration,
    /// Whether the Controller runs from the start.
    started: bool,
    refresh: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            served: Vec::new(),
            fills: true,
            sweep: ControllerConfig::default().sweep,
            receive_wait: ControllerConfig::default().receive_wait,
            started: true,
            refresh: ControllerConfig::default().refresh,
        }
    }
}

/// The in-process queues, counting receives per queue.
struct Counting {
    queue: MemoryQueue,
    receives: Mutex<HashMap<QueueKey, usize>>,
}

impl Counting {
    fn receives(&self, lambda: &str) -> usize {
        let receives = self.receives.lock().unwrap();
        (receives.iter())
            .filter(|(key, _)| key.lambda == lambda)
            .map(|(_, count)| count)
            .sum()
    }
}

#[async_trait]
impl TaskQueue for Counting {
    async fn queue_send_many(
        &self,
        key: &QueueKey,
        messages: Vec<QueueMessage>,
    ) -> Result<(), QueueError> {
        self.queue.queue_send_many(key, messages).await
    }

    async fn queue_receive(
        &self,
        key: &QueueKey,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Delivery>, QueueError> {
        *self
            .receives
            .lock()
            .unwrap()
            .entry(key.clone())
            .or_default() += 1;
        self.queue.queue_receive(key, max, wait).await
    }

    async fn queue_ack_many(
        &self,
        key: &QueueKey,
        receipts: Vec<String>,
    ) -> Result<(), QueueError> {
        self.queue.queue_ack_many(key, receipts).await
    }

    async fn queue_depth(&self, key: &QueueKey) -> Result<u64, QueueError> {
        self.queue.queue_depth(key).await
    }

    async fn queue_delete(&self, key: &QueueKey) -> Result<(), QueueError> {
        self.queue.queue_delete(key).await
    }
}

async fn setup(served: Vec<String>) -> Setup {
    setup_with(Options {
        served,
        ..Options::default()
    })
    .await
}

async fn setup_with(options: Options) -> Setup {
    let dir = tempfile::TempDir::new().unwrap();
    let store = support::sqlite_store(&dir).await;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    for name in ["mail", "zed"] {
        support::store_lambda(&*store, name, LambdaConfig::default()).await;
    }
    let queue = Arc::new(Counting {
        queue: MemoryQueue::new(Duration::from_millis(300)),
        receives: Mutex::default(),
    });
    let runtime = Arc::new(support::on_demand_runtime());
    let fills = Fills::default();
    let frontend: Arc<dyn FrontendApi> = Arc::new(
        Frontend::new(
            store.clone(),
            clock.clone(),
            runtime,
            Arc::new(Wake::default()),
        )
        .fills(fills.clone()),
    );
    let hsc = Arc::new(Hsc::new(
        store.clone(),
        clock.clone(),
        HeartbeatConfig::default(),
    ));
    let consumer = StoreConsumer::new(
        store.clone(),
        queue.clone(),
        clock,
        ConsumerConfig::default(),
    );
    let consumer = match options.fills {
        true => consumer.fills(Arc::new(fills)),
        false => consumer,
    };
    let controller = Controller::new(
        queue.clone(),
        hsc,
        frontend,
        ControllerConfig {
            lambdas: options.served,
            buffer: 8,
            sweep: options.sweep,
            receive_wait: options.receive_wait,
            refresh: options.refresh,
            ..ControllerConfig::default()
        },
    );
    let setup = Setup {
        store,
        queue,
        consumer,
        controller,
        stop: CancellationToken::new(),
        _dir: dir,
    };
    if options.started {
        setup.start();
    }
    setup
}

impl Setup {
    /// Runs the Controller until the test ends.
    fn start(&self) {
        let polling = self.controller.clone();
        let until = self.stop.clone().cancelled_owned();
        tokio::spawn(async move { polling.run(until).await });
    }
}

async fn insert(setup: &Setup, count: usize, priority: u8) -> Vec<String> {
    insert_of(setup, "mail", count, priority).await
}

async fn insert_of(setup: &Setup, lambda: &str, count: usize, priority: u8) -> Vec<String> {
    let tasks = (0..count)
        .map(|_| NewTask {
            lambda: lambda.into(),
            priority: Some(priority),
            ..NewTask::default()
        })
        .collect();
    let ids = setup
        .store
        .task_insert_many(TaskInsertMany {
            tasks,
            now: SystemClock.now(),
        })
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.id)
        .collect();
    setup.consumer.run_once().await.unwrap();
    ids
}

fn one(lambda: &str) -> NextWork {
    NextWork {
        slots: vec![LambdaSlots {
            lambda: lambda.into(),
            free: 1,
        }],
        max_tasks: 1,
        wait: Duration::from_secs(2),
    }
}

/// Waits until the controller's buffers hold `count` messages of `lambda`
/// (off the queue is not enough: a message received is in flight until its
/// poller files it).
async fn buffered(setup: &Setup, lambda: &str, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while setup.controller.buffered(lambda) < count {
        assert!(
            Instant::now() < deadline,
            "the controller buffered {} of {count} messages of {lambda}",
            setup.controller.buffered(lambda)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Two busy lambdas ask one executor for more than it has room for: each
/// hand-out serves them in turn, so the one named last is not starved by
/// the one named first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_lambdas_take_turns_whatever_their_names() {
    let setup = setup(Vec::new()).await;
    insert_of(&setup, "mail", 8, 0).await;
    insert_of(&setup, "zed", 8, 0).await;
    buffered(&setup, "mail", 8).await;
    buffered(&setup, "zed", 8).await;
    let slots = ["mail", "zed"]
        .map(|lambda| LambdaSlots {
            lambda: lambda.into(),
            free: 8,
        })
        .to_vec();
    let tasks = setup
        .controller
        .next_work(NextWork {
            slots,
            max_tasks: 4,
            wait: Duration::from_secs(1),
        })
        .await
        .unwrap();
    let zed = tasks.iter().filter(|t| t.lambda == "zed").count();
    assert_eq!((tasks.len(), zed), (4, 2), "{tasks:?}");
    setup.stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_does_not_delay_a_higher_priority() {
    let setup = setup(Vec::new()).await;
    let low = insert(&setup, 50, 0).await;
    let high = insert(&setup, 1, 2).await;
    // The low buffer holds 8 (its bound), the high one its task.
    buffered(&setup, "mail", 9).await;

    let first = setup.controller.next_work(one("mail")).await.unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].id, high[0], "the high-priority task comes first");
    assert_eq!(first[0].priority, 2);
    let task = setup.store.task_get(&high[0]).await.unwrap().unwrap();
    assert_eq!(
        task.status,
        waft_core::TaskStatus::Claimed,
        "claimed before handed out"
    );

    // The low backlog fills only its own bounded buffer (8 here) and drains
    // in full, in order of arrival per queue.
    let mut seen = Vec::new();
    while seen.len() < low.len() {
        let work = setup.controller.next_work(one("mail")).await.unwrap();
        assert!(
            !work.is_empty(),
            "{} of {} low tasks came",
            seen.len(),
            low.len()
        );
        seen.extend(work.into_iter().map(|t| t.id));
    }
    seen.sort();
    let mut expected = low.clone();
    expected.sort();
    assert_eq!(seen, expected);
    setup.stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_claim_is_not_handed_out() {
    let setup = setup(Vec::new()).await;
    let ids = insert(&setup, 2, 0).await;
    setup
        .store
        .task_cancel(&ids[0], SystemClock.now())
        .await
        .unwrap();
    buffered(&setup, "mail", 2).await;

    let work = setup
        .controller
        .next_work(NextWork {
            slots: vec![LambdaSlots {
                lambda: "mail".into(),
                free: 10,
            }],
            max_tasks: 10,
            wait: Duration::from_secs(2),
        })
        .await
        .unwrap();
    let handed: Vec<&str> = work.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        handed,
        vec![ids[1].as_str()],
        "the cancelled task is not handed out"
    );

    // Nor later, when its message may have come back.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let again = setup.controller.next_work(NextWork {
        wait: Duration::from_millis(300),
        ..one("mail")
    });
    assert!(again.await.unwrap().is_empty());
    setup.stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lambda_it_does_not_serve_is_refused() {
    let setup = setup(vec!["mail".into()]).await;
    let error = setup.controller.next_work(one("other")).await.unwrap_err();
    assert!(
        matches!(error, ServiceError::FailedPrecondition(_)),
        "{error:?}"
    );
    setup.stop.cancel();
}

/// A message says nothing of its payload's size: each task is counted at
/// its lambda's `max_payload`, so a hand-out (the HSC's answer, and the
/// executor's) never holds more than one message carries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_out_holds_what_one_message_carries() {
    let setup = setup(Vec::new()).await;
    let config = LambdaConfig {
        max_payload: waft_core::ByteSize::mib(6),
        ..LambdaConfig::default()
    };
    support::store_lambda(&*setup.store, "bulk", config).await;
    insert_of(&setup, "bulk", 4, 0).await;
    // Asking for it makes the controller poll its queue.
    let first = setup.controller.next_work(NextWork {
        slots: vec![LambdaSlots {
            lambda: "bulk".into(),
            free: 10,
        }],
        max_tasks: 10,
        wait: Duration::from_millis(1),
    });
    let mut handed = first.await.unwrap().len();
    buffered(&setup, "bulk", 4 - handed).await;
    let work = setup
        .controller
        .next_work(NextWork {
            slots: vec![LambdaSlots {
                lambda: "bulk".into(),
                free: 10,
            }],
            max_tasks: 10,
            wait: Duration::from_secs(2),
        })
        .await
        .unwrap();
    handed += work.len();
    // Two of 6 MiB fit under 16 MiB; three do not.
    assert_eq!(work.len(), 2, "{} handed out at once", work.len());
    assert!(handed <= 4);
    setup.stop.cancel();
}

/// Long enough that no sweep runs during a test but the first.
const NO_SWEEP: Duration = Duration::from_secs(600);

/// A fill makes its queue polled at once, and only its queue: the poller
/// stops at the first empty answer, and a queue nothing filled is never
/// polled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_filled_queue_is_polled_and_only_while_it_yields() {
    let setup = setup_with(Options {
        sweep: NO_SWEEP,
        receive_wait: Duration::from_millis(50),
        ..Options::default()
    })
    .await;
    insert(&setup, 3, 0).await;
    buffered(&setup, "mail", 3).await;
    // Ten receive waits: the poller that took the messages had time for
    // ten more receives had it kept polling.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let receives = setup.queue.receives("mail");
    assert!(
        (1..=3).contains(&receives),
        "mail's queue was received from {receives} times"
    );
    assert_eq!(
        setup.queue.receives("zed"),
        0,
        "zed's queue was never filled"
    );
    setup.stop.cancel();
}

/// A fill whose signal was lost is found by the sweep of the backlog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_finds_what_a_lost_fill_signal_missed() {
    let setup = setup_with(Options {
        fills: false,
        sweep: Duration::from_millis(200),
        ..Options::default()
    })
    .await;
    let ids = insert(&setup, 2, 1).await;
    buffered(&setup, "mail", 2).await;
    let work = setup.controller.next_work(one("mail")).await.unwrap();
    assert!(ids.contains(&work[0].id));
    assert_eq!(setup.queue.receives("zed"), 0, "zed has no backlog");
    setup.stop.cancel();
}

/// Without fills or a sweep due, a message waits in its queue: the sweep
/// is what found it above, not a poll of every queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_signal_or_a_sweep_no_queue_is_polled() {
    let setup = setup_with(Options {
        fills: false,
        sweep: NO_SWEEP,
        started: false,
        ..Options::default()
    })
    .await;
    // The first sweep, at start, finds zed's backlog: once zed's queue is
    // polled it has run, and mail's task comes after it.
    insert_of(&setup, "zed", 1, 0).await;
    setup.start();
    let swept = async {
        while setup.queue.receives("zed") == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), swept)
        .await
        .expect("the first sweep polls zed's queue");
    insert(&setup, 1, 0).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(setup.controller.buffered("mail"), 0);
    assert_eq!(setup.queue.receives("mail"), 0);
    setup.stop.cancel();
}

/// A message received by a Controller that died before claiming it comes
/// back after its visibility timeout with no fill to announce it: the
/// sweep finds it, and the task is handed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivered_message_is_found_by_the_sweep() {
    let setup = setup_with(Options {
        fills: false,
        sweep: Duration::from_millis(200),
        started: false,
        ..Options::default()
    })
    .await;
    let ids = insert(&setup, 1, 0).await;
    // The Controller that died took the message and never acknowledged it.
    let key = QueueKey::new("mail", 0);
    let taken = setup.queue.queue.queue_receive(&key, 1, Duration::ZERO);
    assert_eq!(taken.await.unwrap().len(), 1);
    setup.start();
    buffered(&setup, "mail", 1).await;
    let work = setup.controller.next_work(one("mail")).await.unwrap();
    assert_eq!(work.len(), 1);
    assert_eq!(work[0].id, ids[0]);
    setup.stop.cancel();
}

/// A deleted lambda's pollers stop: no buffer, no poll, nothing kept of it.
#[tokio::test]
async fn a_deleted_lambda_is_no_longer_polled() {
    let setup = setup_with(Options {
        refresh: Duration::from_millis(50),
        ..Options::default()
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while !(setup.controller.serves("mail") && setup.controller.serves("zed")) {
        assert!(Instant::now() < deadline, "never served both");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    setup
        .store
        .lambda_delete(waft_store::LambdaDelete {
            name: "zed".into(),
            drop_tasks: true,
        })
        .await
        .unwrap();
    while setup.controller.serves("zed") {
        assert!(Instant::now() < deadline, "still serves the deleted lambda");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(setup.controller.serves("mail"));
    // Its neighbour still runs.
    let ids = insert(&setup, 1, 0).await;
    let claimed = setup.controller.next_work(one("mail")).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].id, ids[0]);
}
