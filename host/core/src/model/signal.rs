//! Signals and waits: what a client sends a task by name, and what a
//! suspended task waits for.
//!
//! A task keeps every signal sent to it, numbered in the order they came,
//! until it ends. An execution waiting for a signal takes the next one of
//! that name it has not taken yet: the `n`-th wait of a name, counted over
//! the task's journal, takes its `n`-th signal. So a signal sent before the
//! wait is there when the wait comes, one sent twice is taken twice, and a
//! replay takes what the journal says it took.

use super::Millis;

/// A signal a client sends a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskSignal {
    pub id: String,
    /// 1 to [`MAX_SIGNAL_NAME`](crate::limits::MAX_SIGNAL_NAME) bytes.
    pub name: String,
    /// At most the task's lambda's `max_payload`.
    pub payload: Vec<u8>,
    pub now: Millis,
}

/// A signal sent: its number among the task's, and whether it woke the
/// task (suspended, waiting for a signal of its name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalSent {
    pub seq: u32,
    pub woke: bool,
}

/// A running execution asks for the signal of `name` after the `taken` it
/// took already, under its lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskSignalRead {
    pub id: String,
    pub lease_token: i64,
    pub name: String,
    pub taken: u32,
}

/// What a suspended task waits for besides the time it is due again.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Wait {
    /// Its time alone: a durable sleep.
    #[default]
    Timer,
    /// A signal of `name`, the one after the `taken` its executions took:
    /// its sending wakes the task; its time is the wait's timeout.
    Signal { name: String, taken: u32 },
    /// Its children of these ids, every one to end (a fan-in): the end of
    /// the last wakes the task. Not timed: its due time is a century away.
    Children { ids: Vec<String> },
}

impl Wait {
    /// The kind, as the store and the overview name it.
    pub fn kind(&self) -> &'static str {
        match self {
            Wait::Timer => "timer",
            Wait::Signal { .. } => "signal",
            Wait::Children { .. } => "children",
        }
    }
}
