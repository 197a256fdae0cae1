//! Liveness (`waft:lambda/heartbeat`): how a long-running lambda says it is
//! alive, and learns early that its execution lost the task's lease.

use crate::bindings::waft::lambda::heartbeat as raw;

/// The execution lost its lease on the task: another executor may run it now.
///
/// Stop at once and cause no further side effects; the host refuses every
/// later call of this execution anyway.
///
/// ```no_run
/// fn step() -> waft_sdk::Outcome {
///     if let Err(lost) = waft_sdk::heartbeat() {
///         return waft_sdk::Outcome::retry(lost.to_string());
///     }
///     waft_sdk::Outcome::success()
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseLost {
    /// Why the host gave the lease up.
    pub reason: String,
}

impl std::fmt::Display for LeaseLost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "lease lost: {}", self.reason)
    }
}

impl std::error::Error for LeaseLost {}

/// Tells the platform this execution is alive.
///
/// The host heartbeats on a lambda's behalf while its instance runs; call
/// this between long steps to learn early that the lease is gone.
///
/// ```no_run
/// for step in 0..10 {
///     // ... one step of work ...
///     waft_sdk::heartbeat()?;
/// }
/// # Ok::<(), waft_sdk::LeaseLost>(())
/// ```
pub fn heartbeat() -> Result<(), LeaseLost> {
    raw::beat(None).map_err(|lost| LeaseLost {
        reason: lost.reason,
    })
}

/// Like [`heartbeat`], with a progress note shown in the task's status.
///
/// ```no_run
/// waft_sdk::heartbeat_with("3 of 10 files uploaded")?;
/// # Ok::<(), waft_sdk::LeaseLost>(())
/// ```
pub fn heartbeat_with(progress: impl Into<String>) -> Result<(), LeaseLost> {
    raw::beat(Some(&progress.into())).map_err(|lost| LeaseLost {
        reason: lost.reason,
    })
}
