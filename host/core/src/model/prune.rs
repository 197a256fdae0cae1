//! What the pruner asks of the store: delete the tasks past their
//! retention, one bounded batch at a time, and hold its duty alone.

use super::Millis;
use crate::retention::Retention;

/// Deletes up to `limit` ended tasks kept longer than their lambda's
/// retention (the installation's, where the lambda sets none), with their
/// attempts, logs, journals and signals; oldest ended first. A task is
/// kept while any of its children is live (a parent reads its children's
/// ends), and while its own parent is live (for the same reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskPrune {
    pub now: Millis,
    /// The installation's retention, for every end (lambdas' own speak
    /// over it).
    pub retention: Retention,
    pub limit: u32,
}

/// What one prune deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    pub tasks: u64,
    /// Whether it stopped at its limit: more may be due.
    pub more: bool,
}

/// Takes or renews the lease on a duty one process at a time holds (the
/// pruner): granted when nobody holds it, when `holder` does, or when the
/// holder's lease has run out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DutyTake {
    pub name: String,
    pub holder: String,
    pub now: Millis,
    /// How long the lease lasts unless renewed.
    pub lease_ms: u64,
}
