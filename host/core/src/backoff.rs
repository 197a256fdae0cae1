//! Retry delays: exponential backoff with jitter.

use std::time::Duration;

/// The longest a task may wait for its next attempt, whoever asks: a
/// lambda's backoff cannot exceed it, and a retry delay a lambda returns is
/// cut to it. A week covers any real outage while keeping every retried task
/// due at a time the store can hold and a person can wait for.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(7 * 24 * 3600);

/// How long a task waits before its next attempt.
///
/// The delay before attempt `n + 1` (after `n` failed attempts) is
/// `base × factor^(n-1)`, capped at `max`, with "equal jitter": half of it is
/// fixed and the other half random, so retries of many tasks that failed
/// together spread out instead of arriving together.
///
/// ```
/// use std::time::Duration;
/// let backoff = waft_core::Backoff::default();
/// let first = backoff.delay(1, 0.0);
/// let later = backoff.delay(5, 0.0);
/// assert!(first < later && later <= backoff.max);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// Delay after the first failure (before jitter). Default 1 s.
    pub base: Duration,
    /// Growth per further failure. Default 2.
    pub factor: f64,
    /// Longest delay. Default 1 h.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            base: Duration::from_secs(1),
            factor: 2.0,
            max: Duration::from_secs(3600),
        }
    }
}

impl Backoff {
    /// The delay after `failures` failed attempts (at least 1), given a
    /// uniform random `jitter` in `[0, 1)`.
    pub fn delay(&self, failures: u32, jitter: f64) -> Duration {
        let exponent = failures.saturating_sub(1).min(64) as i32;
        let full = self.base.as_secs_f64() * self.factor.max(1.0).powi(exponent);
        let capped = full.min(self.max.as_secs_f64());
        let jitter = jitter.clamp(0.0, 1.0);
        Duration::from_secs_f64(capped / 2.0 + capped / 2.0 * jitter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_then_stop_at_the_cap_and_jitter_stays_within_half() {
        let backoff = Backoff::default();
        let mut previous = Duration::ZERO;
        for failures in 1..40 {
            for jitter in [0.0, 0.25, 0.5, 0.999] {
                let delay = backoff.delay(failures, jitter);
                let nominal = (backoff.base.as_secs_f64() * 2f64.powi(failures as i32 - 1))
                    .min(backoff.max.as_secs_f64());
                assert!(delay.as_secs_f64() >= nominal / 2.0 - 1e-9);
                assert!(delay.as_secs_f64() <= nominal + 1e-9);
            }
            let floor = backoff.delay(failures, 0.0);
            assert!(floor >= previous);
            previous = floor;
        }
        assert_eq!(backoff.delay(1000, 0.999_999).as_secs(), 3599);
    }
}
