//! What executors and the HSC exchange: claimed tasks, refusals, results.

use std::time::Duration;

use waft_core::ServiceResult;
use waft_core::model::{ClaimedTask, Refusal, ResultOutcome, TaskResult, Wait};

use super::*;
use crate::proto;

pub fn claimed_to_proto(task: ClaimedTask) -> proto::ClaimedTask {
    proto::ClaimedTask {
        id: task.id,
        lambda: task.lambda,
        lambda_version: task.lambda_version,
        collection: task.collection,
        priority: u32::from(task.priority),
        payload: task.payload,
        attempt: task.attempt,
        scheduled_at_ms: task.scheduled_at,
        lease_token: task.lease_token,
        secrets_version: task.secrets_version,
        journal_len: task.journal_len,
        journal_generation: task.journal_generation,
        tracestate: task.trace.as_ref().and_then(|t| t.tracestate.clone()),
        traceparent: task.trace.map(|t| t.traceparent),
    }
}

pub fn claimed_from_proto(task: proto::ClaimedTask) -> ServiceResult<ClaimedTask> {
    Ok(ClaimedTask {
        priority: priority(task.priority)?,
        id: task.id,
        lambda: task.lambda,
        lambda_version: task.lambda_version,
        collection: task.collection,
        payload: task.payload,
        attempt: task.attempt,
        scheduled_at: task.scheduled_at_ms,
        lease_token: task.lease_token,
        secrets_version: task.secrets_version,
        journal_len: task.journal_len,
        journal_generation: task.journal_generation,
        // A peer's malformed context costs the trace, never the task.
        trace: trace_from_proto(task.traceparent, task.tracestate)
            .ok()
            .flatten(),
    })
}

pub fn refusal_to_proto(refusal: Refusal) -> proto::Refusal {
    use proto::refusal::Reason;
    proto::Refusal {
        reason: Some(match refusal {
            Refusal::NotFound => Reason::NotFound(true),
            Refusal::WrongState(status) => Reason::WrongState(status_to_proto(status) as i32),
            Refusal::StaleEnqueueToken { current } => Reason::StaleEnqueueToken(current),
            Refusal::StaleLease { current } => Reason::StaleLease(current),
            Refusal::Held => Reason::Held(true),
        }),
    }
}

pub fn refusal_from_proto(refusal: proto::Refusal) -> ServiceResult<Refusal> {
    use proto::refusal::Reason;
    Ok(match required(refusal.reason, "refusal.reason")? {
        Reason::NotFound(_) => Refusal::NotFound,
        Reason::WrongState(status) => Refusal::WrongState(status_from_proto(status)?),
        Reason::StaleEnqueueToken(current) => Refusal::StaleEnqueueToken { current },
        Reason::StaleLease(current) => Refusal::StaleLease { current },
        Reason::Held(_) => Refusal::Held,
    })
}

pub fn result_to_proto(result: TaskResult) -> proto::Result {
    use proto::result::Outcome;
    proto::Result {
        task_id: result.id,
        lease_token: result.lease_token,
        outcome: Some(match result.outcome {
            ResultOutcome::Success { output } => Outcome::Success(proto::Success { output }),
            ResultOutcome::Retriable { error, retry_after } => Outcome::Retriable(proto::Failure {
                error,
                retry_after_ms: retry_after.map(millis),
            }),
            ResultOutcome::Fatal { error } => Outcome::Fatal(proto::Failure {
                error,
                retry_after_ms: None,
            }),
            ResultOutcome::Suspend { until, wait } => {
                let (signal, taken, children) = match wait {
                    Wait::Timer => (None, 0, Vec::new()),
                    Wait::Signal { name, taken } => (Some(name), taken, Vec::new()),
                    Wait::Children { ids } => (None, 0, ids),
                };
                Outcome::Suspended(proto::Suspension {
                    until_ms: until,
                    signal,
                    taken,
                    children,
                })
            }
        }),
        log: result.log,
        journal: result.journal.map(journal_write_to_proto),
        replayed: result.replayed,
    }
}

pub fn result_from_proto(result: proto::Result) -> ServiceResult<TaskResult> {
    use proto::result::Outcome;
    Ok(TaskResult {
        outcome: match required(result.outcome, "result.outcome")? {
            Outcome::Success(success) => ResultOutcome::Success {
                output: success.output,
            },
            Outcome::Retriable(failure) => ResultOutcome::Retriable {
                error: failure.error,
                retry_after: failure.retry_after_ms.map(Duration::from_millis),
            },
            Outcome::Fatal(failure) => ResultOutcome::Fatal {
                error: failure.error,
            },
            Outcome::Suspended(suspension) => ResultOutcome::Suspend {
                until: suspension.until_ms,
                wait: match (suspension.signal, suspension.children) {
                    (Some(name), _) => Wait::Signal {
                        name,
                        taken: suspension.taken,
                    },
                    (None, ids) if !ids.is_empty() => Wait::Children { ids },
                    (None, _) => Wait::Timer,
                },
            },
        },
        id: result.task_id,
        lease_token: result.lease_token,
        log: result.log,
        journal: result.journal.map(journal_write_from_proto),
        replayed: result.replayed,
    })
}
