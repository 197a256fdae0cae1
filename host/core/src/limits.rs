//! The limits a lambda runs under.
//!
//! Each limit bounds one resource and, when breached, ends the task with an
//! outcome of its own, so an owner can tell a memory hog from a slow lambda
//! from a chatty one.

use std::time::Duration;

use crate::ByteSize;

/// Resource limits of one lambda's executions.
///
/// ```
/// use waft_core::{ByteSize, Limits};
/// let limits = Limits { max_memory: ByteSize::mib(32), ..Limits::default() };
/// limits.validate().unwrap();
/// assert!(Limits { max_memory: ByteSize::b(0), ..limits }.validate().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Linear memory an instance may grow to (default 64 MiB).
    pub max_memory: ByteSize,
    /// Wall-clock time from the start of the call (default 30 s).
    pub timeout: Duration,
    /// WebAssembly fuel (roughly, instructions) an execution may burn; `None`
    /// leaves CPU bounded by `timeout` alone (the default).
    pub fuel: Option<u64>,
    /// Bytes of output a successful task may return (default 1 MiB).
    pub max_output: ByteSize,
    /// Bytes of log (log calls, stdout, stderr) kept per execution; beyond
    /// it records are dropped and counted (default 256 KiB).
    pub max_log: ByteSize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_memory: ByteSize::mib(64),
            timeout: Duration::from_secs(30),
            fuel: None,
            max_output: ByteSize::mib(1),
            max_log: ByteSize::kib(256),
        }
    }
}

/// Bounds on the limits themselves: a limit outside them is a mistake, not a
/// configuration.
impl Limits {
    /// The smallest memory a component can run in: one 64 KiB page.
    pub const MIN_MEMORY: ByteSize = ByteSize::kib(64);
    /// The largest memory a 32-bit WebAssembly instance can address.
    pub const MAX_MEMORY: ByteSize = ByteSize::gib(4);
    /// The shortest timeout: anything shorter cannot even instantiate.
    pub const MIN_TIMEOUT: Duration = Duration::from_millis(1);
    /// The longest timeout: longer work belongs in several tasks.
    pub const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);
    /// The largest output and log sizes; tasks are not a bulk data channel.
    pub const MAX_OUTPUT: ByteSize = ByteSize::mib(64);

    /// Checks every limit against its bounds.
    pub fn validate(&self) -> Result<(), LimitsError> {
        let out_of_range = |limit: &'static str, value: String, range: String| {
            Err(LimitsError::OutOfRange {
                limit,
                value,
                range,
            })
        };
        if self.max_memory < Self::MIN_MEMORY || self.max_memory > Self::MAX_MEMORY {
            return out_of_range(
                "max memory",
                self.max_memory.to_string(),
                format!("{}..={}", Self::MIN_MEMORY, Self::MAX_MEMORY),
            );
        }
        if self.timeout < Self::MIN_TIMEOUT || self.timeout > Self::MAX_TIMEOUT {
            return out_of_range(
                "timeout",
                format!("{:?}", self.timeout),
                format!("{:?}..={:?}", Self::MIN_TIMEOUT, Self::MAX_TIMEOUT),
            );
        }
        if self.fuel == Some(0) {
            return out_of_range("fuel", "0".into(), "at least 1".into());
        }
        for (limit, value) in [("max output", self.max_output), ("max log", self.max_log)] {
            if value > Self::MAX_OUTPUT {
                return out_of_range(
                    limit,
                    value.to_string(),
                    format!("0..={}", Self::MAX_OUTPUT),
                );
            }
        }
        Ok(())
    }
}

/// A limit outside its bounds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitsError {
    #[error("{limit} of {value} is out of range: it must be within {range}")]
    OutOfRange {
        limit: &'static str,
        value: String,
        range: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        Limits::default().validate().unwrap();
    }

    #[test]
    fn each_bound_is_enforced_with_a_message_naming_the_limit() {
        let base = Limits::default();
        let cases = [
            (
                Limits {
                    max_memory: ByteSize::b(0),
                    ..base
                },
                "max memory",
            ),
            (
                Limits {
                    max_memory: ByteSize::gib(5),
                    ..base
                },
                "max memory",
            ),
            (
                Limits {
                    timeout: Duration::ZERO,
                    ..base
                },
                "timeout",
            ),
            (
                Limits {
                    timeout: Duration::from_secs(90_000),
                    ..base
                },
                "timeout",
            ),
            (
                Limits {
                    fuel: Some(0),
                    ..base
                },
                "fuel",
            ),
            (
                Limits {
                    max_output: ByteSize::gib(1),
                    ..base
                },
                "max output",
            ),
            (
                Limits {
                    max_log: ByteSize::gib(1),
                    ..base
                },
                "max log",
            ),
        ];
        for (limits, name) in cases {
            let message = limits.validate().unwrap_err().to_string();
            assert!(message.starts_with(name), "{message}");
        }
    }
}
