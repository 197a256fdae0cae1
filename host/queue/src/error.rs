//! Errors of the queues.

/// Why a queue operation failed.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// A message body that is not a Waft task pointer (someone else wrote to
    /// the queue).
    #[error("malformed queue message {0:?}")]
    Malformed(String),
    /// The queue service failed or could not be reached.
    #[error("queue service error: {0}")]
    Service(String),
}
