//! What the store keeps, and the parameters of its operations: the model
//! every role, the store and the clients share, one file per part of the
//! platform it serves.
//!
//! Times are Unix milliseconds (`i64`), always passed in by the caller: the
//! store has no clock of its own, so tests and several processes agree on
//! what "now" is.

mod access;
mod check;
mod fan_in;
mod history;
mod journal;
mod lambda;
mod lease;
mod operator;
mod prune;
mod signal;
mod task;

pub use access::*;
pub use check::*;
pub use fan_in::*;
pub use history::*;
pub use journal::*;
pub use lambda::*;
pub use lease::*;
pub use operator::*;
pub use prune::*;
pub use signal::*;
pub use task::*;

/// Unix time in milliseconds.
pub type Millis = i64;

/// `at` in Unix milliseconds (0 before the epoch, `i64::MAX` past what
/// that holds).
pub fn millis_of(at: std::time::SystemTime) -> Millis {
    at.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
