//! What an executor reports of an execution: the outcome policy, and the
//! log rendered as text.
//!
//! The policy decides which ends are worth another attempt. A deadline may
//! be missed under load, a crash may be the host's, an executor may fail to
//! load a lambda: retriable. The other limits (the journal's among them)
//! are the lambda's own doing and would be breached again: fatal. So is a
//! divergence from the task's journal: the same code replaying the same
//! journal diverges the same way (a lambda deployed with
//! `--on-divergence restart` never reports one; the runtime starts it
//! afresh). A suspended execution reports when its wait is over, for the
//! store to wake its task then. A killed execution reports nothing: its
//! lease is gone, and the store brings the task back.

use waft_runtime::{Limit, Outcome, TaskLog};
use waft_store::ResultOutcome;

/// The result to report for an execution that ended with `outcome`;
/// `None` for one that was stopped.
pub fn reported(outcome: Outcome) -> Option<ResultOutcome> {
    Some(match outcome {
        Outcome::Success { output } => ResultOutcome::Success { output },
        Outcome::Retriable {
            message,
            retry_after,
        } => ResultOutcome::Retriable {
            error: message,
            retry_after,
        },
        Outcome::Fatal { message } => ResultOutcome::Fatal { error: message },
        Outcome::LimitExceeded {
            limit: Limit::Deadline,
            detail,
        } => ResultOutcome::Retriable {
            error: format!("limit exceeded: {detail}"),
            retry_after: None,
        },
        Outcome::LimitExceeded { limit, detail } => ResultOutcome::Fatal {
            error: format!("limit exceeded ({}): {detail}", limit.as_str()),
        },
        Outcome::Trapped { message } => ResultOutcome::Retriable {
            error: format!("the lambda crashed: {message}"),
            retry_after: None,
        },
        Outcome::HostError { message } => ResultOutcome::Retriable {
            error: format!("the executor could not run the task: {message}"),
            retry_after: None,
        },
        Outcome::Diverged { message } => ResultOutcome::Fatal { error: message },
        Outcome::Suspended { until, wait } => ResultOutcome::Suspend {
            until: waft_core::model::millis_of(until),
            wait,
        },
        Outcome::Killed { .. } => return None,
    })
}

/// A task's log as text, one record a line: `+12ms info message k=v`, then
/// what was dropped. The runtime renders it ([`TaskLog::render`]), beside
/// the costs that keep it within the lambda's `max_log` plus
/// [`TaskLog::MAX_TRAILER`].
pub fn render_log(log: &TaskLog) -> Option<String> {
    log.render()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use waft_runtime::{Level, LogRecord, LogSource};

    use super::*;

    fn limit(limit: Limit) -> Outcome {
        Outcome::LimitExceeded {
            limit,
            detail: "over".into(),
        }
    }

    #[test]
    fn the_lambdas_own_answers_pass_through() {
        assert_eq!(
            reported(Outcome::Success {
                output: Some(b"ok".to_vec())
            }),
            Some(ResultOutcome::Success {
                output: Some(b"ok".to_vec())
            })
        );
        let retry_after = Some(Duration::from_secs(3));
        assert_eq!(
            reported(Outcome::Retriable {
                message: "busy".into(),
                retry_after
            }),
            Some(ResultOutcome::Retriable {
                error: "busy".into(),
                retry_after
            })
        );
        assert_eq!(
            reported(Outcome::Fatal {
                message: "no".into()
            }),
            Some(ResultOutcome::Fatal { error: "no".into() })
        );
    }

    /// A missed deadline, a crash and a host failure are retried; the other
    /// limits would be breached again and are final.
    #[test]
    fn only_what_may_pass_is_retried() {
        let retried = |outcome| {
            matches!(
                reported(outcome),
                Some(ResultOutcome::Retriable {
                    retry_after: None,
                    ..
                })
            )
        };
        assert!(retried(limit(Limit::Deadline)));
        assert!(retried(Outcome::Trapped {
            message: "unreachable".into()
        }));
        assert!(retried(Outcome::HostError {
            message: "cannot load".into()
        }));
        for kind in [Limit::Memory, Limit::Fuel, Limit::Output, Limit::Journal] {
            let Some(ResultOutcome::Fatal { error }) = reported(limit(kind)) else {
                panic!("{kind:?} must be fatal");
            };
            assert!(error.contains(kind.as_str()), "{error}");
        }
    }

    /// A divergence would happen again on every retry: the task fails,
    /// with the runtime's words (where, and how the calls differ).
    #[test]
    fn a_divergence_is_fatal_and_says_where() {
        let message = "diverged at entry 3: the journal has wasi:random/random.get-random-u64, \
                       the lambda called wasi:clocks/wall-clock.now";
        assert_eq!(
            reported(Outcome::Diverged {
                message: message.into()
            }),
            Some(ResultOutcome::Fatal {
                error: message.into()
            })
        );
    }

    #[test]
    fn a_stopped_execution_reports_nothing() {
        assert_eq!(
            reported(Outcome::Killed {
                reason: "lease lost".into()
            }),
            None
        );
    }

    #[test]
    fn logs_render_a_record_a_line_and_say_what_was_dropped() {
        assert_eq!(render_log(&TaskLog::default()), None);
        let log = TaskLog {
            records: vec![LogRecord {
                at: Duration::from_millis(12),
                source: LogSource::Lambda(Level::Info),
                message: "sent".into(),
                fields: vec![("to".into(), "ada".into())],
                replayed: false,
            }],
            dropped_records: 2,
            dropped_bytes: 40,
        };
        assert_eq!(
            render_log(&log).unwrap(),
            "+12ms info sent to=ada\n[2 records (40 bytes) dropped: the log budget was spent]\n"
        );
    }
}
