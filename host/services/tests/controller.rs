//! The Controller on the embedded backends (a SQLite file, in-process
//! queues, the real HSC): highest priority first from bounded per-priority
//! buffers, claims before handing out, refused claims never handed out.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use waft_core::LambdaConfig;
use waft_queue::MemoryQueue;
use waft_services::{
    Clock, ConsumerConfig, Controller, ControllerApi, ControllerConfig, Frontend, FrontendApi,
    HeartbeatConfig, Hsc, LambdaSlots, NextWork, ServiceError, StoreConsumer, SystemClock, Wake,
};
use waft_store::{NewTask, TaskInsertMany, TaskStore};

struct Setup {
    store: Arc<dyn TaskStore>,
    consumer: StoreConsumer,
    controller: Controller,
    stop: CancellationToken,
    _dir: tempfile::TempDir,
}

async fn setup(served: Vec<String>) -> Setup {
    let dir = tempfile::TempDir::new().unwrap();
    let store = support::sqlite_store(&dir).await;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    for name in ["mail", "zed"] {
        support::store_lambda(&*store, name, LambdaConfig::default()).await;
    }
    let queue = Arc::new(MemoryQueue::new(Duration::from_millis(300)));
    let runtime = Arc::new(support::on_demand_runtime());
    let frontend: Arc<dyn FrontendApi> = Arc::new(Frontend::new(
        store.clone(),
        clock.clone(),
        runtime,
        Arc::new(Wake::default()),
    ));
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
    let controller = Controller::new(
        queue.clone(),
        hsc,
        frontend,
        ControllerConfig {
            lambdas: served,
            buffer: 8,
            ..ControllerConfig::default()
        },
    );
    let stop = CancellationToken::new();
    let polling = controller.clone();
    let until = stop.clone().cancelled_owned();
    tokio::spawn(async move { polling.run(until).await });
    Setup {
        store,
        consumer,
        controller,
        stop,
        _dir: dir,
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
