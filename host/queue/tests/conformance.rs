//! The queue conformance suite, run against every backend: the in-process
//! queue, and SQS through a real SQS-compatible server (fauxqs) that the
//! tests start on loopback. Under `CI=true` the SQS tests fail rather than
//! skip when it cannot start.

#[path = "conformance/suite.rs"]
mod suite;

use std::sync::atomic::{AtomicU32, Ordering};

use waft_queue::{MemoryQueue, QueueKey, QueueMessage, SqsConfig, SqsQueue, TaskQueue};

/// A lambda name no other test uses, so every test has queues of its own.
fn lambda() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "l{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

async fn sqs() -> Option<SqsQueue> {
    let server = waft_testing::sqs()?;
    Some(
        SqsQueue::new(SqsConfig {
            endpoint_url: Some(server.endpoint.clone()),
            visibility_timeout: suite::VISIBILITY,
            ..SqsConfig::default()
        })
        .await,
    )
}

macro_rules! conformance {
    ($($check:ident),* $(,)?) => {
        mod memory_backend {
            $(
                #[tokio::test]
                async fn $check() {
                    let queue = super::MemoryQueue::new(super::suite::VISIBILITY);
                    super::suite::$check(&queue, &super::lambda()).await;
                }
            )*
        }

        mod sqs_backend {
            $(
                #[tokio::test]
                async fn $check() {
                    let Some(queue) = super::sqs().await else { return };
                    super::suite::$check(&queue, &super::lambda()).await;
                }
            )*
        }
    };
}

conformance!(
    sent_messages_are_received_once_acknowledged,
    unacknowledged_messages_come_back,
    an_empty_receive_waits_then_returns_nothing,
    a_long_poll_wakes_when_a_message_arrives,
    queues_of_other_priorities_and_lambdas_are_apart,
    a_deleted_queue_loses_its_messages_and_comes_back_empty,
);

/// A queue another process deleted: the URL this one cached fails once,
/// is forgotten, and the next send makes the queue anew.
#[tokio::test]
async fn a_queue_deleted_elsewhere_is_made_anew() {
    let (Some(mine), Some(theirs)) = (sqs().await, sqs().await) else {
        return;
    };
    let key = QueueKey::new(lambda(), 0);
    let message = |id: &str| QueueMessage {
        task_id: id.into(),
        enqueue_token: 1,
        traceparent: None,
        tracestate: None,
        turn: None,
    };
    mine.queue_send_many(&key, vec![message("a")])
        .await
        .unwrap();
    theirs.queue_delete(&key).await.unwrap();
    let refused = mine.queue_send_many(&key, vec![message("b")]).await;
    assert!(refused.is_err(), "a send to a deleted queue: {refused:?}");
    mine.queue_send_many(&key, vec![message("c")])
        .await
        .unwrap();
    let got = mine
        .queue_receive(&key, 10, std::time::Duration::from_secs(1))
        .await
        .unwrap();
    let ids: Vec<_> = got.iter().map(|d| d.message.task_id.as_str()).collect();
    assert_eq!(ids, ["c"]);
}
