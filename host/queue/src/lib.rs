//! Waft's queues: one per `<lambda, priority>`, between the Store Consumer
//! and the Controllers.
//!
//! A queue only carries pointers to tasks (id and enqueue token); the store
//! holds the truth. So a queue may lose or duplicate a message: the store's
//! enqueue timeout re-enqueues a lost one, and a duplicate fails its claim
//! (stale enqueue token). A message also carries the W3C trace context of
//! the enqueue, so the claim's span continues the task's trace; SQS keeps
//! it in message attributes, beside a body older releases still read.
//! One narrow trait, [`TaskQueue`], two backends:
//! [`MemoryQueue`] for the embedded mode and [`SqsQueue`] for production,
//! passing one conformance suite.

mod error;
mod memory;
mod sqs;
mod turns;

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

pub use error::QueueError;
pub use memory::MemoryQueue;
pub use sqs::{SqsConfig, SqsQueue, https_client};
pub use turns::{Turned, Turns};

/// Which queue: a lambda's tasks of one priority.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QueueKey {
    pub lambda: String,
    pub priority: u8,
}

impl QueueKey {
    /// The key of `lambda`'s queue at `priority`.
    pub fn new(lambda: impl Into<String>, priority: u8) -> Self {
        Self {
            lambda: lambda.into(),
            priority,
        }
    }

    /// A name every queue service accepts (letters, digits, `-`, `_`; SQS
    /// allows 80 characters): `<prefix>-<lambda>-p<priority>`, with the
    /// lambda's `.` and `_` escaped so that distinct lambdas never share a
    /// queue.
    ///
    /// ```
    /// let key = waft_queue::QueueKey::new("mail.v2", 3);
    /// assert_eq!(key.queue_name("waft"), "waft-mail_dv2-p3");
    /// ```
    pub fn queue_name(&self, prefix: &str) -> String {
        let mut lambda = String::with_capacity(self.lambda.len());
        for c in self.lambda.chars() {
            match c {
                '_' => lambda.push_str("_u"),
                '.' => lambda.push_str("_d"),
                c => lambda.push(c),
            }
        }
        format!("{prefix}-{lambda}-p{}", self.priority)
    }
}

impl fmt::Display for QueueKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.lambda, self.priority)
    }
}

/// A pointer to an enqueued task.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct QueueMessage {
    pub task_id: String,
    /// The token the store issued with this enqueue; the claim must match.
    pub enqueue_token: i64,
    /// The W3C `traceparent` of the enqueue's span, when traced.
    pub traceparent: Option<String>,
    /// Its `tracestate`, when it has one.
    pub tracestate: Option<String>,
    /// The key whose turns it takes, when its lambda is fair between keys.
    /// The in-process queue hands out messages in weighted turns between
    /// keys; SQS keeps its own order and drops this (the store's lookahead
    /// per key bounds what a key puts ahead of another there).
    pub turn: Option<Turn>,
}

/// A fair lambda's key, and its weight: how many messages it is handed
/// out a turn.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Turn {
    pub key: String,
    pub weight: u32,
}

impl QueueMessage {
    fn encode(&self) -> String {
        format!("{}:{}", self.task_id, self.enqueue_token)
    }

    fn decode(body: &str) -> Result<Self, QueueError> {
        let (task_id, token) = body
            .rsplit_once(':')
            .ok_or_else(|| QueueError::Malformed(body.to_owned()))?;
        let enqueue_token = token
            .parse()
            .map_err(|_| QueueError::Malformed(body.to_owned()))?;
        if task_id.is_empty() {
            return Err(QueueError::Malformed(body.to_owned()));
        }
        Ok(Self {
            task_id: task_id.to_owned(),
            enqueue_token,
            traceparent: None,
            tracestate: None,
            turn: None,
        })
    }
}

/// A received message and the handle that acknowledges it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub message: QueueMessage,
    /// Opaque; pass it to [`TaskQueue::queue_ack_many`].
    pub receipt: String,
}

/// The queues. Messages received and not acknowledged within the visibility
/// timeout are delivered again.
#[async_trait]
pub trait TaskQueue: Send + Sync {
    /// Appends messages to a queue (created on first use).
    async fn queue_send_many(
        &self,
        key: &QueueKey,
        messages: Vec<QueueMessage>,
    ) -> Result<(), QueueError>;

    /// Takes up to `max` messages, waiting up to `wait` for the first one
    /// (long polling). An empty answer means none arrived in time.
    async fn queue_receive(
        &self,
        key: &QueueKey,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Delivery>, QueueError>;

    /// Removes received messages for good. Best effort: a receipt that is
    /// no longer valid (its message was delivered again) is ignored, since
    /// the redelivered copy's claim fails anyway.
    async fn queue_ack_many(&self, key: &QueueKey, receipts: Vec<String>)
    -> Result<(), QueueError>;

    /// Messages waiting (not in flight); approximate for SQS.
    async fn queue_depth(&self, key: &QueueKey) -> Result<u64, QueueError>;

    /// Deletes a queue with every message in it (its lambda was deleted).
    /// A queue that does not exist is already deleted: not an error.
    async fn queue_delete(&self, key: &QueueKey) -> Result<(), QueueError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_names_are_valid_and_distinct() {
        let names: Vec<String> = ["a.b", "a_b", "a_db", "a-b"]
            .iter()
            .map(|l| QueueKey::new(*l, 0).queue_name("waft"))
            .collect();
        for (i, a) in names.iter().enumerate() {
            assert!(
                a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
                "{a}"
            );
            for b in &names[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn messages_round_trip_and_bad_bodies_are_refused() {
        let message = QueueMessage {
            task_id: "01J:x".into(),
            enqueue_token: 7,
            traceparent: None,
            tracestate: None,
            turn: None,
        };
        assert_eq!(QueueMessage::decode(&message.encode()).unwrap(), message);
        for bad in ["", "abc", ":3", "id:notanumber"] {
            assert!(QueueMessage::decode(bad).is_err(), "{bad}");
        }
    }
}
