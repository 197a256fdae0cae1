//! Exit codes of `waft`, stable for scripts.
//!
//! | code | meaning |
//! |---|---|
//! | 0  | success |
//! | 1  | Waft itself failed (I/O, engine) |
//! | 2  | bad usage or input: arguments, payload, limits |
//! | 3  | the file is not a Waft lambda |
//! | 4  | not found: no such task or lambda |
//! | 5  | refused: the server cannot do it in this state (e.g. cancel an ended task) |
//! | 6  | the server is unreachable or unavailable |
//! | 7  | `task wait` timed out |
//! | 8  | not allowed: no token, an unknown or revoked one, or one without the right |
//! | 10 | the lambda failed, retriable |
//! | 11 | the lambda failed, fatal |
//! | 12 | the lambda crashed (trap: panic, unreachable, stack overflow) |
//! | 13 | memory limit exceeded |
//! | 14 | fuel (CPU) limit exceeded |
//! | 15 | timeout (wall-clock deadline) exceeded |
//! | 16 | output limit exceeded |
//! | 17 | killed (e.g. interrupted with Ctrl-C) |
//! | 18 | the host could not run the instance |
//! | 19 | journal limit exceeded (a durable lambda made too many host calls) |
//! | 20 | `task wait`: the task ended in fatal failure |
//! | 21 | `task wait`: the task is dead (attempts used up) |
//! | 22 | `task wait`: the task was dropped by a gate |
//! | 23 | `task wait`: the task was cancelled |
//! | 24 | the lambda's host calls stopped matching its task's journal (it diverged) |
//! | 25 | the lambda suspended (a wait longer than the sandbox holds an instance) |
//! | 26 | `lambda deploy --check`: some live tasks' journals depart from the new code |

use waft_runtime::{Limit, Outcome};

pub const SUCCESS: u8 = 0;
pub const INTERNAL: u8 = 1;
pub const USAGE: u8 = 2;
pub const NOT_A_LAMBDA: u8 = 3;
pub const NOT_FOUND: u8 = 4;
pub const REFUSED: u8 = 5;
pub const UNAVAILABLE: u8 = 6;
pub const TIMED_OUT: u8 = 7;
pub const NOT_ALLOWED: u8 = 8;
pub const RETRIABLE: u8 = 10;
pub const FATAL: u8 = 11;
pub const TRAPPED: u8 = 12;
pub const MEMORY: u8 = 13;
pub const FUEL: u8 = 14;
pub const DEADLINE: u8 = 15;
pub const OUTPUT: u8 = 16;
pub const KILLED: u8 = 17;
pub const HOST_ERROR: u8 = 18;
pub const JOURNAL: u8 = 19;
pub const TASK_FATAL: u8 = 20;
pub const TASK_DEAD: u8 = 21;
pub const TASK_DROPPED: u8 = 22;
pub const TASK_CANCELLED: u8 = 23;
pub const DIVERGED: u8 = 24;
pub const SUSPENDED: u8 = 25;
pub const DEPARTS: u8 = 26;

/// The exit code that reports `outcome`.
pub fn for_outcome(outcome: &Outcome) -> u8 {
    match outcome {
        Outcome::Success { .. } => SUCCESS,
        Outcome::Retriable { .. } => RETRIABLE,
        Outcome::Fatal { .. } => FATAL,
        Outcome::Trapped { .. } => TRAPPED,
        Outcome::LimitExceeded { limit, .. } => match limit {
            Limit::Memory => MEMORY,
            Limit::Fuel => FUEL,
            Limit::Deadline => DEADLINE,
            Limit::Output => OUTPUT,
            Limit::Journal => JOURNAL,
        },
        Outcome::Killed { .. } => KILLED,
        Outcome::HostError { .. } => HOST_ERROR,
        Outcome::Diverged { .. } => DIVERGED,
        Outcome::Suspended { .. } => SUSPENDED,
    }
}

/// A failure to report: a message for a person and an exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    /// Bad usage or input (exit 2).
    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            code: USAGE,
            message: message.into(),
        }
    }

    /// Waft itself failed (exit 1).
    pub fn internal(message: impl Into<String>) -> Self {
        Self {
            code: INTERNAL,
            message: message.into(),
        }
    }
}
