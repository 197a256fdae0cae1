//! The spans of a task's path through the pipeline, made in one place so
//! their names and attributes agree across the roles.
//!
//! Each is a child of the step before it, across processes, through the
//! [`TraceContext`] the task carries: `schedule` (the Frontend's store
//! write; a child of the client's `traceparent`, or of the parent
//! execution's span for a child task) → `enqueue` (the consumer's send to
//! the queue) → `claim` (the Controller's claim at the HSC) → `execute`
//! (one per attempt) → the outbound requests' spans (`waft-runtime`).
//! Attributes follow OpenTelemetry's messaging conventions
//! (`messaging.system`, `messaging.operation.name`,
//! `messaging.destination.name`, `messaging.message.id`), with Waft's own
//! under `waft.`.
//!
//! The spans are at DEBUG: the export's layer takes Waft's spans at that
//! level whatever the log's filter, while a log at `info` (or with no trace
//! export configured, any level above `debug`) leaves them disabled, each a
//! disabled callsite's check. At INFO a log at `info` recorded every
//! task's four spans, which slowed a loaded executor enough to miss its
//! first heartbeats.

use tracing::Span;
use tracing::field::Empty;
use waft_core::TraceContext;
use waft_store::AttemptOutcome;

/// The Frontend's `schedule` of one task, before its id is known.
pub(crate) fn schedule(lambda: &str, parent: Option<&TraceContext>) -> Span {
    let span = tracing::debug_span!(
        "schedule",
        otel.kind = "producer",
        messaging.system = "waft",
        messaging.operation.name = "schedule",
        messaging.destination.name = lambda,
        messaging.message.id = Empty,
        waft.task.id = Empty,
        otel.status_code = Empty,
    );
    waft_telemetry::set_parent(&span, parent);
    span
}

/// The consumer's `enqueue` of a task onto its queue.
pub(crate) fn enqueue(
    task_id: &str,
    lambda: &str,
    priority: u8,
    parent: Option<&TraceContext>,
) -> Span {
    let span = tracing::debug_span!(
        "enqueue",
        otel.kind = "producer",
        messaging.system = "waft",
        messaging.operation.name = "send",
        messaging.destination.name = lambda,
        messaging.message.id = task_id,
        waft.task.id = task_id,
        waft.task.priority = priority,
        otel.status_code = Empty,
    );
    waft_telemetry::set_parent(&span, parent);
    span
}

/// The Controller's `claim` of a queued task at the HSC.
pub(crate) fn claim(task_id: &str, lambda: &str, parent: Option<&TraceContext>) -> Span {
    let span = tracing::debug_span!(
        "claim",
        otel.kind = "consumer",
        messaging.system = "waft",
        messaging.operation.name = "receive",
        messaging.destination.name = lambda,
        messaging.message.id = task_id,
        waft.task.id = task_id,
        waft.task.attempt = Empty,
        waft.claim.refused = Empty,
        otel.status_code = Empty,
    );
    waft_telemetry::set_parent(&span, parent);
    span
}

/// The Executor's `execute`: one attempt of a task.
pub(crate) fn execute(
    task_id: &str,
    lambda: &str,
    version: u32,
    attempt: u32,
    parent: Option<&TraceContext>,
) -> Span {
    let span = tracing::debug_span!(
        "execute",
        otel.kind = "consumer",
        messaging.system = "waft",
        messaging.operation.name = "process",
        messaging.destination.name = lambda,
        messaging.message.id = task_id,
        waft.task.id = task_id,
        waft.lambda = lambda,
        waft.lambda.version = version,
        waft.task.attempt = attempt,
        waft.task.outcome = Empty,
        otel.status_code = Empty,
        otel.status_description = Empty,
    );
    waft_telemetry::set_parent(&span, parent);
    span
}

/// Records how an attempt ended on its `execute` span: a retriable or
/// fatal failure, or a lost execution, is an error.
pub(crate) fn executed(span: &Span, outcome: AttemptOutcome, error: Option<&str>) {
    span.record("waft.task.outcome", outcome.as_str());
    if matches!(
        outcome,
        AttemptOutcome::Retriable | AttemptOutcome::Fatal | AttemptOutcome::Lost
    ) {
        span.record("otel.status_code", "error");
        if let Some(error) = error {
            span.record("otel.status_description", error);
        }
    }
}

/// Marks a span's operation as failed.
pub(crate) fn failed(span: &Span) {
    span.record("otel.status_code", "error");
}
