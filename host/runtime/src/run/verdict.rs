//! The verdict on a run: what the end of an instance (the lambda's answer,
//! a trap, a stop by the host, a halt by the journal) means as an
//! [`Outcome`], checked against the output limit and with the secrets'
//! values taken out. The host's own records are read before a trap's
//! code, which says how a guest died but not why.

use std::time::Duration;

use waft_core::Limits;
use wasmtime::Trap;

use super::{HostState, Stop};
use crate::contract::current::wit::types as wit_types;
use crate::durable::Halt;
use crate::lambda::error_chain;
use crate::redact::Redactor;
use crate::{KillSwitch, Limit, Outcome};

/// The outcome of an execution its journal stopped.
pub(super) fn halted(halt: Halt) -> Outcome {
    match halt {
        Halt::Diverged(divergence) => Outcome::Diverged {
            message: divergence.to_string(),
        },
        halt @ Halt::Ended { .. } => Outcome::Killed {
            reason: halt.to_string(),
        },
        Halt::Full(detail) => Outcome::LimitExceeded {
            limit: Limit::Journal,
            detail,
        },
    }
}

/// The outcome without the secrets' values.
pub(super) fn redact(outcome: Outcome, redactor: &Redactor) -> Outcome {
    match outcome {
        Outcome::Success { output } => Outcome::Success {
            output: output.map(|bytes| redactor.bytes(bytes)),
        },
        Outcome::Retriable {
            message,
            retry_after,
        } => Outcome::Retriable {
            message: redactor.text(message),
            retry_after,
        },
        Outcome::Fatal { message } => Outcome::Fatal {
            message: redactor.text(message),
        },
        Outcome::Trapped { message } => Outcome::Trapped {
            message: redactor.text(message),
        },
        other @ (Outcome::LimitExceeded { .. }
        | Outcome::Killed { .. }
        | Outcome::HostError { .. }
        | Outcome::Diverged { .. }
        | Outcome::Suspended { .. }) => other,
    }
}

pub(super) fn stopped(stop: Stop, kill: &KillSwitch, limits: &Limits) -> Outcome {
    match stop {
        Stop::Killed => Outcome::Killed {
            reason: kill.reason().unwrap_or("killed").to_owned(),
        },
        Stop::Deadline => Outcome::LimitExceeded {
            limit: Limit::Deadline,
            detail: format!("still running after the timeout of {:?}", limits.timeout),
        },
        // Its halt is the outcome; this is what is left when it cannot be read.
        Stop::Journal => Outcome::Trapped {
            message: "stopped by its journal".into(),
        },
    }
}

/// The lambda's own answer, checked against the output limit.
pub(super) fn answered(outcome: wit_types::Outcome, limits: &Limits) -> Outcome {
    let max = limits.max_output.as_usize();
    match outcome {
        wit_types::Outcome::Success(output) => match output {
            Some(bytes) if bytes.len() > max => Outcome::LimitExceeded {
                limit: Limit::Output,
                detail: format!(
                    "output of {} bytes is over the limit of {}",
                    bytes.len(),
                    limits.max_output
                ),
            },
            output => Outcome::Success { output },
        },
        wit_types::Outcome::Retriable(failure) => Outcome::Retriable {
            message: truncate(failure.message, max),
            retry_after: failure.retry_after_ms.map(Duration::from_millis),
        },
        wit_types::Outcome::Fatal(message) => Outcome::Fatal {
            message: truncate(message, max),
        },
    }
}

/// What an instance that returned an error (a trap, or a failed
/// instantiation) ran into. The host's own records come first: a trap's code
/// says how the guest died, not why.
pub(super) fn trapped(
    error: &wasmtime::Error,
    state: &HostState,
    kill: &KillSwitch,
    limits: &Limits,
) -> Outcome {
    if let Some(stop) = state.stopped {
        return stopped(stop, kill, limits);
    }
    if kill.is_killed() {
        return stopped(Stop::Killed, kill, limits);
    }
    if let Some(detail) = state.limiter.breach(error) {
        return Outcome::LimitExceeded {
            limit: Limit::Memory,
            detail,
        };
    }
    match error.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => Outcome::LimitExceeded {
            limit: Limit::Fuel,
            detail: format!(
                "burnt all {} units of fuel",
                limits
                    .fuel
                    .map_or("available".to_owned(), |f| f.to_string())
            ),
        },
        // The trap itself says what happened; the wasm backtrace that
        // wraps it names only anonymous functions of a stripped binary.
        Some(trap) => Outcome::Trapped {
            message: trap.to_string(),
        },
        // Not a trap: the host failed to set the instance up.
        None if is_allocation_failure(error) => Outcome::HostError {
            message: error_chain(error),
        },
        None => Outcome::Trapped {
            message: error_chain(error),
        },
    }
}

/// Every pooling slot is taken: the host is full, the task is not at fault.
fn is_allocation_failure(error: &wasmtime::Error) -> bool {
    error
        .downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
        .is_some()
}

fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}
