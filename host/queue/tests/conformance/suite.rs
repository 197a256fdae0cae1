//! The behaviour every `TaskQueue` backend must have. Each check gets fresh
//! queues whose visibility timeout is one second.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use waft_queue::{QueueKey, QueueMessage, TaskQueue};

pub const VISIBILITY: Duration = Duration::from_secs(1);

fn messages(prefix: &str, count: usize) -> Vec<QueueMessage> {
    (0..count)
        .map(|i| QueueMessage {
            task_id: format!("{prefix}-{i}"),
            enqueue_token: i as i64 + 1,
            // Every other message traced, one of those with a tracestate.
            traceparent: (i % 2 == 1).then(|| format!("00-{:032x}-{:016x}-01", i + 1, i + 1)),
            tracestate: (i == 1).then(|| "vendor=a:b;c".to_owned()),
            turn: None,
        })
        .collect()
}

/// Receives until `count` messages came or a receive returns nothing.
async fn drain(queue: &dyn TaskQueue, key: &QueueKey, count: usize) -> Vec<waft_queue::Delivery> {
    let mut all = Vec::new();
    while all.len() < count {
        let got = queue
            .queue_receive(key, 10, Duration::from_secs(1))
            .await
            .unwrap();
        if got.is_empty() {
            break;
        }
        all.extend(got);
    }
    all
}

fn ids(deliveries: &[waft_queue::Delivery]) -> BTreeSet<String> {
    deliveries
        .iter()
        .map(|d| d.message.task_id.clone())
        .collect()
}

pub async fn sent_messages_are_received_once_acknowledged(queue: &dyn TaskQueue, lambda: &str) {
    let key = QueueKey::new(lambda, 0);
    let sent = messages("t", 25);
    queue.queue_send_many(&key, sent.clone()).await.unwrap();
    assert_eq!(queue.queue_depth(&key).await.unwrap(), 25);
    let got = drain(queue, &key, 25).await;
    assert_eq!(got.len(), 25, "each message once");
    assert_eq!(ids(&got), sent.iter().map(|m| m.task_id.clone()).collect());
    let token = got
        .iter()
        .find(|d| d.message.task_id == "t-4")
        .unwrap()
        .message
        .enqueue_token;
    assert_eq!(token, 5, "tokens travel with their task");
    for message in &sent {
        let received = got
            .iter()
            .find(|d| d.message.task_id == message.task_id)
            .unwrap();
        assert_eq!(&received.message, message, "trace contexts travel too");
    }
    queue
        .queue_ack_many(&key, got.into_iter().map(|d| d.receipt).collect())
        .await
        .unwrap();
    // Acknowledged: not delivered again after the visibility timeout.
    tokio::time::sleep(VISIBILITY + Duration::from_millis(500)).await;
    assert!(
        queue
            .queue_receive(&key, 10, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(queue.queue_depth(&key).await.unwrap(), 0);
}

pub async fn unacknowledged_messages_come_back(queue: &dyn TaskQueue, lambda: &str) {
    let key = QueueKey::new(lambda, 0);
    queue
        .queue_send_many(&key, messages("lost", 3))
        .await
        .unwrap();
    let first = drain(queue, &key, 3).await;
    assert_eq!(first.len(), 3);
    // In flight: invisible until the timeout.
    assert!(
        queue
            .queue_receive(&key, 10, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
    tokio::time::sleep(VISIBILITY + Duration::from_millis(500)).await;
    let again = drain(queue, &key, 3).await;
    assert_eq!(ids(&again), ids(&first));
    // A stale receipt is ignored; the fresh one acknowledges.
    queue
        .queue_ack_many(&key, first.into_iter().map(|d| d.receipt).collect())
        .await
        .unwrap();
    queue
        .queue_ack_many(&key, again.into_iter().map(|d| d.receipt).collect())
        .await
        .unwrap();
}

pub async fn an_empty_receive_waits_then_returns_nothing(queue: &dyn TaskQueue, lambda: &str) {
    let key = QueueKey::new(lambda, 0);
    let started = Instant::now();
    let got = queue
        .queue_receive(&key, 10, Duration::from_secs(1))
        .await
        .unwrap();
    let waited = started.elapsed();
    assert!(got.is_empty());
    assert!(
        waited >= Duration::from_millis(900),
        "returned after {waited:?}"
    );
    assert!(waited < Duration::from_secs(5), "returned after {waited:?}");
}

pub async fn a_long_poll_wakes_when_a_message_arrives(queue: &dyn TaskQueue, lambda: &str) {
    let key = QueueKey::new(lambda, 0);
    // Create the queue first, so the send below is not slowed by it.
    queue.queue_depth(&key).await.unwrap();
    let started = Instant::now();
    let receive = queue.queue_receive(&key, 10, Duration::from_secs(10));
    let send = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        queue
            .queue_send_many(&key, messages("late", 1))
            .await
            .unwrap();
    };
    let (got, ()) = futures::join!(receive, send);
    let got = got.unwrap();
    assert_eq!(ids(&got), BTreeSet::from(["late-0".to_owned()]));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "woke after {:?}",
        started.elapsed()
    );
}

pub async fn queues_of_other_priorities_and_lambdas_are_apart(queue: &dyn TaskQueue, lambda: &str) {
    let high = QueueKey::new(lambda, 2);
    let low = QueueKey::new(lambda, 0);
    let other = QueueKey::new(format!("{lambda}.other"), 2);
    queue
        .queue_send_many(&high, messages("high", 2))
        .await
        .unwrap();
    queue
        .queue_send_many(&low, messages("low", 3))
        .await
        .unwrap();
    assert_eq!(
        ids(&drain(queue, &high, 2).await),
        ["high-0", "high-1"].map(String::from).into()
    );
    assert_eq!(drain(queue, &low, 3).await.len(), 3);
    assert!(
        queue
            .queue_receive(&other, 10, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn a_deleted_queue_loses_its_messages_and_comes_back_empty(
    queue: &dyn TaskQueue,
    lambda: &str,
) {
    let key = QueueKey::new(lambda, 0);
    let other = QueueKey::new(lambda, 1);
    queue
        .queue_send_many(&key, messages("old", 3))
        .await
        .unwrap();
    queue
        .queue_send_many(&other, messages("kept", 1))
        .await
        .unwrap();
    queue.queue_delete(&key).await.unwrap();
    // Deleting what is gone, or what never was, is no error.
    queue.queue_delete(&key).await.unwrap();
    queue
        .queue_delete(&QueueKey::new(format!("{lambda}.never"), 0))
        .await
        .unwrap();
    // Used again, it is a new, empty queue; its neighbour kept its message.
    queue
        .queue_send_many(&key, messages("new", 1))
        .await
        .unwrap();
    assert_eq!(
        ids(&drain(queue, &key, 2).await),
        ["new-0"].map(String::from).into()
    );
    assert_eq!(
        ids(&drain(queue, &other, 1).await),
        ["kept-0"].map(String::from).into()
    );
}
