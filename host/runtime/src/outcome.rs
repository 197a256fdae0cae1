//! How an execution ended, from the host's point of view.

use std::time::{Duration, SystemTime};

use waft_core::model::{JournalWrite, Wait};

use crate::TaskLog;

/// The limit an execution breached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limit {
    /// Linear memory beyond `max_memory`.
    Memory,
    /// Fuel beyond `fuel`.
    Fuel,
    /// Wall-clock time beyond `timeout`.
    Deadline,
    /// Output beyond `max_output`.
    Output,
    /// A journal beyond [`MAX_JOURNAL_ENTRIES`](waft_core::limits::MAX_JOURNAL_ENTRIES)
    /// or [`MAX_JOURNAL_BYTES`](waft_core::limits::MAX_JOURNAL_BYTES).
    Journal,
}

impl Limit {
    /// The limit's name, as in configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Memory => "memory",
            Limit::Fuel => "fuel",
            Limit::Deadline => "deadline",
            Limit::Output => "output",
            Limit::Journal => "journal",
        }
    }
}

/// How an execution ended.
///
/// The first three are the lambda's own answer (a WIT value); the rest are
/// the host's verdict on an instance that did not answer: a limit breach, a
/// crash, a kill, or a failure of the host itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The lambda finished the task.
    Success { output: Option<Vec<u8>> },
    /// The lambda failed and asks for a retry.
    Retriable {
        message: String,
        retry_after: Option<Duration>,
    },
    /// The lambda failed for good.
    Fatal { message: String },
    /// The instance breached one of its limits and was stopped.
    LimitExceeded { limit: Limit, detail: String },
    /// The instance crashed (a panic, an unreachable, a stack overflow...).
    Trapped { message: String },
    /// The kill switch stopped the instance.
    Killed { reason: String },
    /// The host could not run the instance (no free instance slot, say);
    /// nothing is known about the task, which may be retried.
    HostError { message: String },
    /// The lambda's calls stopped matching its task's journal: "diverged at
    /// entry N: the journal has X, the lambda called Y". Nothing live ran
    /// after the mismatch.
    Diverged { message: String },
    /// The lambda waited on nothing but its own timers, the earliest of
    /// them `until` (by the wall clock), or for a signal not sent yet until
    /// then, further away than the sandbox's `suspend_after`: the instance
    /// was dropped, and its task resumes then (or when the signal it waits
    /// for is sent) by replaying its journal, which holds the wait.
    Suspended { until: SystemTime, wait: Wait },
}

impl Outcome {
    /// A short name for the kind of outcome: `success`, `retriable`,
    /// `fatal`, `limit-memory`, `limit-fuel`, `limit-deadline`,
    /// `limit-output`, `limit-journal`, `trapped`, `killed`, `host-error`,
    /// `diverged`, `suspended`.
    pub fn kind(&self) -> &'static str {
        match self {
            Outcome::Success { .. } => "success",
            Outcome::Retriable { .. } => "retriable",
            Outcome::Fatal { .. } => "fatal",
            Outcome::LimitExceeded { limit, .. } => match limit {
                Limit::Memory => "limit-memory",
                Limit::Fuel => "limit-fuel",
                Limit::Deadline => "limit-deadline",
                Limit::Output => "limit-output",
                Limit::Journal => "limit-journal",
            },
            Outcome::Trapped { .. } => "trapped",
            Outcome::Killed { .. } => "killed",
            Outcome::HostError { .. } => "host-error",
            Outcome::Diverged { .. } => "diverged",
            Outcome::Suspended { .. } => "suspended",
        }
    }
}

/// The result of running one task.
#[derive(Debug, Clone)]
pub struct Execution {
    pub outcome: Outcome,
    /// What the lambda logged, within its budget.
    pub log: TaskLog,
    /// From the start of instantiation to the end of the call.
    pub duration: Duration,
    /// Fuel burnt, when the engine meters fuel.
    pub fuel_consumed: Option<u64>,
    /// The largest linear memory the instance asked for, in bytes.
    pub peak_memory: u64,
    /// When the instance was gone (dropped), by the wall clock: measured
    /// where it ran, so a caller that gets to read the execution late still
    /// knows when it ended.
    pub ended_at: SystemTime,
    /// The outbound HTTP requests it made or was refused, in order.
    pub outbound: Vec<crate::OutboundRecord>,
    /// What its task's journal should become beyond what the execution
    /// already wrote through [`TaskHost::journal`](crate::TaskHost::journal):
    /// to be written with its result.
    pub journal: JournalWrite,
    /// Journal entries it was answered from before it ran live.
    pub replayed: u32,
    /// Where a [`Sandbox::replay_only`](crate::Sandbox::replay_only)
    /// execution stopped: the entry and call its journal did not answer.
    pub journal_end: Option<(u32, String)>,
    /// Where the lambda's calls stopped matching its journal, when they
    /// did ([`Outcome::Diverged`] says it in words).
    pub divergence: Option<crate::Divergence>,
}

impl Execution {
    /// An execution that never reached the guest: the host could not run it.
    pub fn host_error(message: impl Into<String>) -> Self {
        Self {
            outcome: Outcome::HostError {
                message: message.into(),
            },
            log: TaskLog::default(),
            duration: Duration::ZERO,
            fuel_consumed: None,
            peak_memory: 0,
            ended_at: SystemTime::now(),
            outbound: Vec::new(),
            journal: JournalWrite::default(),
            replayed: 0,
            journal_end: None,
            divergence: None,
        }
    }
}
