//! Fan-in: a task waits for children it scheduled to end, and learns how
//! each ended.
//!
//! An execution asks, under its lease, how the children it waits for
//! stand: while one has not ended, only how many are left; once all have,
//! each one's end, outputs included (read once, when they are needed). A
//! dead letter counts as ended: its parent learns it died, and a redrive
//! that brings it back does not change what the parent was told.

use crate::TaskStatus;

/// A running execution asks how its task's `children` stand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskChildrenRead {
    pub id: String,
    pub lease_token: i64,
    /// Children of task `id`, each once, at most
    /// [`MAX_AWAITED`](crate::limits::MAX_AWAITED).
    pub children: Vec<String>,
}

/// How the children an execution waits for stand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChildrenState {
    /// `live` of them have not ended.
    Waiting { live: u32 },
    /// Every one has ended: each one's end, in the order asked.
    Ended(Vec<ChildEnd>),
}

/// How a child ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildEnd {
    pub id: String,
    /// One of the ended states ([`machine::ENDED`](crate::machine::ENDED)).
    pub status: TaskStatus,
    /// What it returned, when it succeeded with an output.
    pub output: Option<Vec<u8>>,
    /// Why it failed, when it did.
    pub error: Option<String>,
}
