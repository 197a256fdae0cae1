//! The journal of a durable task: the host calls its executions made and
//! the answers they got, kept across attempts so that the next attempt is
//! answered from it instead of calling again.
//!
//! The runtime decides what a call and an answer are (it encodes them);
//! the store keeps entries in order, fenced by the lease of the execution
//! that writes them, and replaces a journal's tail when an execution says
//! so (a retried call, a discarded journal).

use super::Millis;

/// One host call of a task's executions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalEntry {
    /// Its place in the journal, from 0.
    pub seq: u32,
    /// `interface.function`, as WIT names them
    /// (`wasi:clocks/wall-clock.now`).
    pub call: String,
    /// SHA-256 of the call's arguments: a replayed call must match it.
    pub digest: Vec<u8>,
    /// The answer the lambda got, as the runtime encodes it. Never a
    /// secret's value: the runtime keeps a secret's name and reads the
    /// value again on replay.
    pub answer: Vec<u8>,
    /// For people: what was asked and answered, without secrets.
    pub summary: String,
    /// Whether the call reached outside the sandbox (an HTTP request, a
    /// child task): such an entry is written before its answer reaches the
    /// lambda.
    pub outside: bool,
    /// The attempt whose execution made the call live.
    pub attempt: u32,
    /// When it was made.
    pub at: Millis,
    /// How long it took, in microseconds.
    pub took_us: u64,
}

impl JournalEntry {
    /// Bytes it takes in a message, roughly: what batches are cut by.
    pub fn wire_size(&self) -> usize {
        self.call.len() + self.digest.len() + self.answer.len() + self.summary.len() + 48
    }
}

/// A change to a task's journal: its entries from `from` on are replaced by
/// `entries` (numbered `from`, `from + 1`…). An empty `entries` cuts the
/// journal to its first `from`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JournalWrite {
    pub from: u32,
    pub entries: Vec<JournalEntry>,
}

impl JournalWrite {
    /// The journal's length once written.
    pub fn end(&self) -> u32 {
        self.from + u32::try_from(self.entries.len()).unwrap_or(u32::MAX)
    }
}

/// A running execution's write to its task's journal: refused unless it
/// still holds the task's lease.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskJournalWrite {
    pub id: String,
    pub lease_token: i64,
    /// The lambda version the execution runs: a task with a journal keeps
    /// running it (a redrive onto another version, or `--fresh`,
    /// discards the journal).
    pub version: u32,
    pub write: JournalWrite,
}

/// A page of a task's journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskJournalRead {
    pub id: String,
    /// The first entry wanted.
    pub from: u32,
    /// At most this many entries.
    pub limit: u32,
    /// Without their answers (what a person's view needs).
    pub without_answers: bool,
}
