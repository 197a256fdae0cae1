//! Time as the services see it: Unix milliseconds, injectable in tests.

use std::time::{SystemTime, UNIX_EPOCH};

use waft_store::Millis;

/// A source of "now".
pub trait Clock: Send + Sync {
    /// Now, in Unix milliseconds.
    fn now(&self) -> Millis;
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Millis {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }
}
