//! The in-process queue of the embedded mode.
//!
//! It behaves as SQS does where Waft relies on it: long polling, and
//! messages received but not acknowledged come back after the visibility
//! timeout. It never loses a message on its own; a crash loses them all,
//! and the store's enqueue timeout brings the tasks back.
//!
//! Where SQS keeps rough arrival order, it hands messages out in weighted
//! turns between the keys of a fair lambda ([`QueueMessage::turn`]; a
//! deficit round-robin): a key's next message waits behind at most one
//! turn of every other key, however many messages another key has queued.
//! Messages without a turn take turns as one key, so a lambda that is not
//! fair is served first in, first out.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::{Delivery, QueueError, QueueKey, QueueMessage, TaskQueue};

/// Queues in this process's memory. Cheap to clone; clones share queues.
#[derive(Clone, Debug)]
pub struct MemoryQueue {
    queues: Arc<Mutex<HashMap<QueueKey, Queue>>>,
    visibility_timeout: Duration,
    next_receipt: Arc<AtomicU64>,
}

#[derive(Debug, Default)]
struct Queue {
    ready: Turns,
    in_flight: HashMap<String, (QueueMessage, Instant)>,
    arrived: Arc<Notify>,
}

/// Messages waiting, in weighted turns between keys.
#[derive(Debug, Default)]
struct Turns {
    by_key: HashMap<String, VecDeque<QueueMessage>>,
    /// The keys with messages, the one whose turn it is first.
    order: VecDeque<String>,
    /// Messages handed out in the current turn.
    served: u32,
    len: usize,
}

impl Turns {
    fn push(&mut self, message: QueueMessage) {
        let key = message.turn.as_ref().map_or("", |turn| turn.key.as_str());
        let waiting = match self.by_key.get_mut(key) {
            Some(waiting) => waiting,
            None => {
                self.order.push_back(key.to_owned());
                self.by_key.entry(key.to_owned()).or_default()
            }
        };
        waiting.push_back(message);
        self.len += 1;
    }

    /// The next message: the current key's, which keeps the turn for as
    /// many messages as it weighs.
    fn pop(&mut self) -> Option<QueueMessage> {
        let key = self.order.front()?;
        let waiting = self.by_key.get_mut(key)?;
        let message = waiting.pop_front()?;
        self.len -= 1;
        self.served += 1;
        let weight = message.turn.as_ref().map_or(1, |turn| turn.weight.max(1));
        if waiting.is_empty() {
            self.by_key.remove(key);
            self.order.pop_front();
            self.served = 0;
        } else if self.served >= weight {
            self.order.rotate_left(1);
            self.served = 0;
        }
        Some(message)
    }

    fn len(&self) -> usize {
        self.len
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }
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
    use crate::Turn;

    fn message(id: &str, turn: Option<(&str, u32)>) -> QueueMessage {
        QueueMessage {
            task_id: id.to_owned(),
            enqueue_token: 1,
            traceparent: None,
            tracestate: None,
            turn: turn.map(|(key, weight)| Turn {
                key: key.to_owned(),
                weight,
            }),
        }
    }

    fn order(turns: &mut Turns) -> Vec<String> {
        std::iter::from_fn(|| turns.pop())
            .map(|m| m.task_id)
            .collect()
    }

    #[test]
    fn keys_take_weighted_turns_and_messages_without_one_go_in_order() {
        let mut turns = Turns::default();
        for i in 0..5 {
            turns.push(message(&format!("a{i}"), Some(("a", 1))));
        }
        turns.push(message("b0", Some(("b", 2))));
        turns.push(message("b1", Some(("b", 2))));
        turns.push(message("b2", Some(("b", 2))));
        turns.push(message("n0", None));
        assert_eq!(turns.len(), 9);
        assert_eq!(
            order(&mut turns),
            ["a0", "b0", "b1", "n0", "a1", "b2", "a2", "a3", "a4"]
        );
        assert!(turns.is_empty());

        for i in 0..3 {
            turns.push(message(&format!("n{i}"), None));
        }
        assert_eq!(order(&mut turns), ["n0", "n1", "n2"]);
    }

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
