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

/// Where one message of an execution's journal writes stands among the
/// others, so that the store takes each in its turn and a write larger
/// than one message whole or not at all.
///
/// An execution numbers the messages it sends under its lease from 0
/// (`after`: how many it sent before), and the store takes message
/// `after` only when it holds exactly `after` of them: a late copy of an
/// earlier one changes nothing, and a copy of the one it took last is
/// answered as written (the retry of a call whose answer was lost). A write
/// larger than one message goes as consecutive parts from `start`: each but
/// the last (`more`) is staged, unseen, and the last replaces the journal
/// from `start` with them and its own entries at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalPart {
    /// The messages of this lease's journal writes sent before this one.
    pub after: u32,
    /// Where the whole write starts: the `from` of its first part.
    pub start: u32,
    /// More parts of the same write follow.
    pub more: bool,
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
    /// Where it stands among the execution's writes. `None` from an
    /// executor of a release before parts (a rolling upgrade): a whole
    /// write, taken in any turn.
    pub part: Option<JournalPart>,
    /// The journal's new generation, carried by the first write of a
    /// journal the execution discarded (`--on-divergence restart`): it
    /// starts at entry 0, and the task's children are named by it from
    /// then on. `None` for every other write.
    pub generation: Option<u32>,
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

/// A page of a lambda's live tasks that hold a journal (suspended, waiting
/// for a retry, dead...), each with its whole journal, in id order: what a
/// deploy's check replays against the new code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournaledTasks {
    pub lambda: String,
    /// Tasks past this id (the last of the previous page).
    pub after: Option<String>,
    /// At most this many tasks (capped at 1000). A page also ends once its
    /// journals hold some megabytes, after a whole task: an empty page is
    /// the end.
    pub limit: u32,
}

/// A task and its journal, as [`JournaledTasks`] reads them.
#[derive(Debug, Clone, PartialEq)]
pub struct JournaledTask {
    pub task: super::Task,
    /// The version whose code wrote the journal, which a retry replays it
    /// on.
    pub journal_version: Option<u32>,
    pub entries: Vec<JournalEntry>,
}
