//! The in-process queue of the embedded mode.
//!
//! It behaves as SQS does where Waft relies on it: long polling, and
//! messages received but not acknowledged come back after the visibility
//! timeout. It never loses a message on its own; a crash loses them all,
//! and the store's enqueue timeout brings the tasks back.
//!
//! Where SQS keeps rough arrival order, it hands messages out in weighted
//! turns between the keys of a fair lambda ([`Turns`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::{Delivery, QueueError, QueueKey, QueueMessage, TaskQueue, Turns};

/// Queues in this process's memory. Cheap to clone; clones share queues.
#[derive(Clone, Debug)]
pub struct MemoryQueue {
    queues: Arc<Mutex<HashMap<QueueKey, Queue>>>,
    visibility_timeout: Duration,
    next_receipt: Arc<AtomicU64>,
}

#[derive(Debug, Default)]
struct Queue {
    ready: Turns<QueueMessage>,
    in_flight: HashMap<String, (QueueMessage, Instant)>,
    arrived: Arc<Notify>,
}

impl Queue {
    /// Puts messages whose visibility timeout passed back in line.
    fn expire(&mut self, now: Instant) {
        let expired: Vec<String> = self
            .in_flight
            .iter()
            .filter(|(_, (_, until))| *until <= now)
            .map(|(receipt, _)| receipt.clone())
            .collect();
        for receipt in expired {
            if let Some((message, _)) = self.in_flight.remove(&receipt) {
                self.ready.push(message);
            }
        }
    }

    fn next_expiry(&self) -> Option<Instant> {
        self.in_flight.values().map(|(_, until)| *until).min()
    }
}

impl MemoryQueue {
    /// Queues whose received messages come back after `visibility_timeout`
    /// unless acknowledged.
    pub fn new(visibility_timeout: Duration) -> Self {
        Self {
            queues: Arc::default(),
            visibility_timeout,
            next_receipt: Arc::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<QueueKey, Queue>> {
        self.queues.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl TaskQueue for MemoryQueue {
    async fn queue_send_many(
        &self,
        key: &QueueKey,
        messages: Vec<QueueMessage>,
    ) -> Result<(), QueueError> {
        let mut queues = self.lock();
        let queue = queues.entry(key.clone()).or_default();
        for message in messages {
            queue.ready.push(message);
        }
        queue.arrived.notify_waiters();
        Ok(())
    }

    async fn queue_receive(
        &self,
        key: &QueueKey,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Delivery>, QueueError> {
        let deadline = Instant::now() + wait;
        loop {
            let arrived = {
                let mut queues = self.lock();
                let queue = queues.entry(key.clone()).or_default();
                let now = Instant::now();
                queue.expire(now);
                if !queue.ready.is_empty() || now >= deadline {
                    let take = max.min(queue.ready.len());
                    let mut deliveries = Vec::with_capacity(take);
                    while deliveries.len() < take
                        && let Some(message) = queue.ready.pop()
                    {
                        let receipt = self
                            .next_receipt
                            .fetch_add(1, Ordering::Relaxed)
                            .to_string();
                        queue.in_flight.insert(
                            receipt.clone(),
                            (message.clone(), now + self.visibility_timeout),
                        );
                        deliveries.push(Delivery { message, receipt });
                    }
                    return Ok(deliveries);
                }
                let wake = queue
                    .next_expiry()
                    .map_or(deadline, |expiry| expiry.min(deadline));
                (queue.arrived.clone(), wake)
            };
            let (arrived, wake) = arrived;
            // Register for the next send before looking once more, so a send
            // in between is either seen now or wakes the wait.
            let notified = arrived.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let sent_meanwhile = self
                .lock()
                .get(key)
                .is_some_and(|queue| !queue.ready.is_empty());
            if !sent_meanwhile {
                let _ = tokio::time::timeout_at(wake, notified).await;
            }
        }
    }

    async fn queue_ack_many(
        &self,
        key: &QueueKey,
        receipts: Vec<String>,
    ) -> Result<(), QueueError> {
        let mut queues = self.lock();
        if let Some(queue) = queues.get_mut(key) {
            for receipt in receipts {
                queue.in_flight.remove(&receipt);
            }
        }
        Ok(())
    }

    async fn queue_delete(&self, key: &QueueKey) -> Result<(), QueueError> {
        if let Some(queue) = self.lock().remove(key) {
            // A receive waiting on it looks again, and finds a new queue.
            queue.arrived.notify_waiters();
        }
        Ok(())
    }

    async fn queue_depth(&self, key: &QueueKey) -> Result<u64, QueueError> {
        let mut queues = self.lock();
        Ok(queues.get_mut(key).map_or(0, |queue| {
            queue.expire(Instant::now());
            queue.ready.len() as u64
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::turns::tests::message;

    #[tokio::test]
    async fn a_late_key_is_served_within_a_turn_of_a_backlog() {
        let queue = MemoryQueue::new(Duration::from_secs(30));
        let key = QueueKey::new("fair", 0);
        let backlog = (0..10_000)
            .map(|i| message(&format!("a{i}"), Some(("a", 1))))
            .collect();
        queue.queue_send_many(&key, backlog).await.unwrap();
        queue
            .queue_send_many(&key, vec![message("b", Some(("b", 1)))])
            .await
            .unwrap();
        let got = queue.queue_receive(&key, 2, Duration::ZERO).await.unwrap();
        let ids: Vec<&str> = got.iter().map(|d| d.message.task_id.as_str()).collect();
        assert_eq!(ids, ["a0", "b"]);
        assert_eq!(queue.queue_depth(&key).await.unwrap(), 9_999);
    }
}
