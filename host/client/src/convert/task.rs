//! Tasks: their states, requests, continuations and attempts.

use std::time::Duration;

use waft_core::ServiceResult;
use waft_core::model::{
    Attempt, AttemptOutcome, Continuation, Depth, HistoryPoint, LambdaStats, Overview, Task,
};
use waft_core::roles::{HistoryAnswer, HistoryQuery, RunAt, TaskRequest};
use waft_core::task::check_json_payload;
use waft_core::{TaskStatus, TraceContext};

use super::*;
use crate::proto;

/// The contract's name of a status: `TASK_STATUS_` and the status's name
/// in capitals. Statuses convert by name, so a new one needs its value in
/// the proto and nothing here (the round-trip test fails until the proto
/// has it).
const PREFIX: &str = "TASK_STATUS_";

pub fn status_to_proto(status: TaskStatus) -> proto::TaskStatus {
    let name = format!("{PREFIX}{}", status.as_str().to_ascii_uppercase());
    proto::TaskStatus::from_str_name(&name).unwrap_or(proto::TaskStatus::Unspecified)
}

pub fn status_from_proto(value: i32) -> ServiceResult<TaskStatus> {
    let status = proto::TaskStatus::try_from(value)
        .map_err(|_| invalid(format!("unknown task status {value}")))?;
    if status == proto::TaskStatus::Unspecified {
        return Err(invalid("task status is unspecified"));
    }
    status
        .as_str_name()
        .strip_prefix(PREFIX)
        .and_then(|name| name.to_ascii_lowercase().parse().ok())
        .ok_or_else(|| invalid(format!("unknown task status {value}")))
}

pub fn task_to_proto(task: Task) -> proto::Task {
    proto::Task {
        id: task.id,
        lambda: task.lambda,
        collection: task.collection,
        priority: u32::from(task.priority),
        payload: task.payload,
        status: status_to_proto(task.status) as i32,
        attempt: task.attempt,
        max_attempts: task.max_attempts,
        scheduled_at_ms: task.scheduled_at,
        next_trigger_at_ms: task.next_trigger_at,
        held: task.held,
        parked: task.parked,
        paced: task.paced,
        key_paced: task.key_paced,
        debounced: task.debounced,
        awaits_turn: task.awaits_turn,
        created_at_ms: task.created_at,
        enqueued_at_ms: task.enqueued_at,
        claimed_at_ms: task.claimed_at,
        heartbeat_at_ms: task.heartbeat_at,
        finished_at_ms: task.finished_at,
        progress: task.progress,
        last_error: task.last_error,
        output: task.output,
        parent_id: task.parent_id,
        idempotency_key: task.idempotency_key,
        key: task.key,
        schedule_id: task.cron_id,
        log: task.log,
        version: task.version,
        then: task.continuation.map(continuation_to_proto),
        waiting_for_signal: task.waiting_for_signal,
        waiting_for_children: task.waiting_for_children,
    }
}

pub fn task_from_proto(task: proto::Task) -> ServiceResult<Task> {
    Ok(Task {
        status: status_from_proto(task.status)?,
        priority: priority(task.priority)?,
        id: task.id,
        lambda: task.lambda,
        collection: task.collection,
        payload: task.payload,
        attempt: task.attempt,
        max_attempts: task.max_attempts,
        scheduled_at: task.scheduled_at_ms,
        next_trigger_at: task.next_trigger_at_ms,
        held: task.held,
        parked: task.parked,
        paced: task.paced,
        key_paced: task.key_paced,
        debounced: task.debounced,
        awaits_turn: task.awaits_turn,
        // Internal to the store; never on the wire.
        enqueue_token: 0,
        lease_token: 0,
        created_at: task.created_at_ms,
        enqueued_at: task.enqueued_at_ms,
        claimed_at: task.claimed_at_ms,
        heartbeat_at: task.heartbeat_at_ms,
        finished_at: task.finished_at_ms,
        progress: task.progress,
        last_error: task.last_error,
        log: task.log,
        output: task.output,
        parent_id: task.parent_id,
        idempotency_key: task.idempotency_key,
        key: task.key,
        cron_id: task.schedule_id,
        version: task.version,
        continuation: task.then.map(continuation_from_proto).transpose()?,
        waiting_for_signal: task.waiting_for_signal,
        waiting_for_children: task.waiting_for_children,
    })
}

pub fn new_task_from_proto(task: proto::NewTask) -> ServiceResult<TaskRequest> {
    if task.payload_is_json {
        check_json_payload(&task.payload).map_err(invalid)?;
    }
    let run_at = match task.when {
        None => RunAt::Now,
        Some(proto::new_task::When::RunAtMs(at)) => RunAt::At(at),
        Some(proto::new_task::When::DelayMs(delay)) => RunAt::After(Duration::from_millis(delay)),
    };
    Ok(TaskRequest {
        priority: task.priority.map(priority).transpose()?,
        lambda: task.lambda,
        payload: task.payload,
        collection: task.collection,
        run_at,
        idempotency_key: task.idempotency_key,
        key: task.key,
        debounce: task.debounce_ms.map(Duration::from_millis),
        parent_id: task.parent_id,
        version: task.version,
        parent_lease: task.parent_lease,
        then: task.then.map(continuation_from_proto).transpose()?,
        trace: trace_from_proto(task.traceparent, task.tracestate)?,
        id: task.id,
    })
}

/// A trace context from its two fields; a tracestate alone is ignored.
pub fn trace_from_proto(
    traceparent: Option<String>,
    tracestate: Option<String>,
) -> ServiceResult<Option<TraceContext>> {
    traceparent
        .map(|parent| TraceContext::parse(&parent, tracestate.as_deref()))
        .transpose()
        .map_err(|e| invalid(e.to_string()))
}

pub fn new_task_to_proto(task: TaskRequest) -> proto::NewTask {
    proto::NewTask {
        lambda: task.lambda,
        payload: task.payload,
        collection: task.collection,
        priority: task.priority.map(u32::from),
        when: match task.run_at {
            RunAt::Now => None,
            RunAt::At(at) => Some(proto::new_task::When::RunAtMs(at)),
            RunAt::After(delay) => Some(proto::new_task::When::DelayMs(
                u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            )),
        },
        idempotency_key: task.idempotency_key,
        key: task.key,
        debounce_ms: task
            .debounce
            .map(|window| u64::try_from(window.as_millis()).unwrap_or(u64::MAX)),
        parent_id: task.parent_id,
        version: task.version,
        parent_lease: task.parent_lease,
        then: task.then.map(continuation_to_proto),
        payload_is_json: false,
        tracestate: task.trace.as_ref().and_then(|t| t.tracestate.clone()),
        traceparent: task.trace.map(|t| t.traceparent),
        id: task.id,
    }
}

pub fn continuation_to_proto(then: Continuation) -> proto::Continuation {
    proto::Continuation {
        lambda: then.lambda,
        collection: then.collection,
        priority: then.priority.map(u32::from),
        key: then.key,
    }
}

pub fn continuation_from_proto(then: proto::Continuation) -> ServiceResult<Continuation> {
    Ok(Continuation {
        priority: then.priority.map(priority).transpose()?,
        lambda: then.lambda,
        collection: then.collection,
        key: then.key,
    })
}

pub fn attempt_to_proto(attempt: Attempt) -> proto::Attempt {
    let outcome = match attempt.outcome {
        AttemptOutcome::Success => proto::AttemptOutcome::Success,
        AttemptOutcome::Retriable => proto::AttemptOutcome::Retriable,
        AttemptOutcome::Fatal => proto::AttemptOutcome::Fatal,
        AttemptOutcome::Lost => proto::AttemptOutcome::Lost,
        AttemptOutcome::Suspended => proto::AttemptOutcome::Suspended,
    };
    proto::Attempt {
        attempt: attempt.attempt,
        lease_token: attempt.lease_token,
        outcome: outcome as i32,
        error: attempt.error,
        log: attempt.log,
        started_at_ms: attempt.started_at,
        ended_at_ms: attempt.ended_at,
        replayed: attempt.replayed,
    }
}

pub fn attempt_from_proto(attempt: proto::Attempt) -> ServiceResult<Attempt> {
    let outcome = match proto::AttemptOutcome::try_from(attempt.outcome) {
        Ok(proto::AttemptOutcome::Success) => AttemptOutcome::Success,
        Ok(proto::AttemptOutcome::Retriable) => AttemptOutcome::Retriable,
        Ok(proto::AttemptOutcome::Fatal) => AttemptOutcome::Fatal,
        Ok(proto::AttemptOutcome::Lost) => AttemptOutcome::Lost,
        Ok(proto::AttemptOutcome::Suspended) => AttemptOutcome::Suspended,
        _ => {
            return Err(invalid(format!(
                "attempt outcome {} is unknown",
                attempt.outcome
            )));
        }
    };
    Ok(Attempt {
        attempt: attempt.attempt,
        lease_token: attempt.lease_token,
        outcome,
        error: attempt.error,
        log: attempt.log,
        started_at: attempt.started_at_ms,
        ended_at: attempt.ended_at_ms,
        replayed: attempt.replayed,
    })
}

pub fn overview_to_proto(overview: Overview) -> proto::LambdaStatsResponse {
    proto::LambdaStatsResponse {
        now_ms: overview.now,
        lambdas: overview
            .lambdas
            .into_iter()
            .map(|stats| proto::LambdaStats {
                lambda: stats.lambda,
                ready: stats
                    .ready
                    .into_iter()
                    .map(|depth| proto::Depth {
                        priority: u32::from(depth.priority),
                        count: depth.count,
                        oldest_due_ms: depth.oldest_due,
                    })
                    .collect(),
                waiting: stats.waiting,
                held: stats.held,
                parked: stats.parked,
                paced: stats.paced,
                suspended: stats.suspended,
                waiting_for_signal: stats.waiting_for_signal,
                waiting_for_children: stats.waiting_for_children,
                running: stats.running,
                dead: stats.dead,
                succeeded: stats.succeeded,
                failed: stats.failed,
            })
            .collect(),
    }
}

pub fn overview_from_proto(overview: proto::LambdaStatsResponse) -> ServiceResult<Overview> {
    Ok(Overview {
        now: overview.now_ms,
        lambdas: overview
            .lambdas
            .into_iter()
            .map(|stats| {
                Ok(LambdaStats {
                    lambda: stats.lambda,
                    ready: stats
                        .ready
                        .into_iter()
                        .map(|depth| {
                            Ok(Depth {
                                priority: priority(depth.priority)?,
                                count: depth.count,
                                oldest_due: depth.oldest_due_ms,
                            })
                        })
                        .collect::<ServiceResult<_>>()?,
                    waiting: stats.waiting,
                    held: stats.held,
                    parked: stats.parked,
                    paced: stats.paced,
                    suspended: stats.suspended,
                    waiting_for_signal: stats.waiting_for_signal,
                    waiting_for_children: stats.waiting_for_children,
                    running: stats.running,
                    dead: stats.dead,
                    succeeded: stats.succeeded,
                    failed: stats.failed,
                })
            })
            .collect::<ServiceResult<_>>()?,
    })
}

pub fn history_query_from_proto(request: proto::TaskHistoryRequest) -> HistoryQuery {
    HistoryQuery {
        lambda: Some(request.lambda).filter(|l| !l.is_empty()),
        range: match request.range_ms {
            0 => Duration::from_secs(3600),
            ms => Duration::from_millis(ms),
        },
        step: Some(request.step_ms)
            .filter(|ms| *ms > 0)
            .map(Duration::from_millis),
    }
}

pub fn history_query_to_proto(query: HistoryQuery) -> proto::TaskHistoryRequest {
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    proto::TaskHistoryRequest {
        lambda: query.lambda.unwrap_or_default(),
        range_ms: ms(query.range),
        step_ms: query.step.map_or(0, ms),
    }
}

pub fn history_to_proto(answer: HistoryAnswer) -> proto::TaskHistoryResponse {
    proto::TaskHistoryResponse {
        step_ms: u64::try_from(answer.step.as_millis()).unwrap_or(u64::MAX),
        points: answer
            .points
            .into_iter()
            .map(|p| proto::HistoryPoint {
                at_ms: p.at,
                succeeded: p.succeeded,
                failed: p.failed,
                dead: p.dead,
                latency_p50_ms: p.latency_p50,
                latency_p95_ms: p.latency_p95,
                latency_p99_ms: p.latency_p99,
                depth: p.depth,
            })
            .collect(),
    }
}

pub fn history_from_proto(answer: proto::TaskHistoryResponse) -> HistoryAnswer {
    HistoryAnswer {
        step: Duration::from_millis(answer.step_ms),
        points: answer
            .points
            .into_iter()
            .map(|p| HistoryPoint {
                at: p.at_ms,
                succeeded: p.succeeded,
                failed: p.failed,
                dead: p.dead,
                latency_p50: p.latency_p50_ms,
                latency_p95: p.latency_p95_ms,
                latency_p99: p.latency_p99_ms,
                depth: p.depth,
            })
            .collect(),
    }
}
