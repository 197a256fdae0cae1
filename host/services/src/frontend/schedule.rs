//! Scheduling tasks ([`ClientApi::task_schedule_many`](crate::api::ClientApi::task_schedule_many)):
//! the request and each task checked, their lambdas held to their quotas,
//! the tasks stored in one transaction, a `schedule` span each, and the
//! Store Consumer told when the first comes due.
//!
//! Apart from the other client calls because scheduling is the Frontend's
//! hot path and the one call that touches quotas, traces and the due
//! signal at once; the caller's right to schedule is checked before
//! (`access.rs`).

use std::collections::BTreeMap;

use waft_core::limits::check_payload;
use waft_store::{Millis, NewTask, TaskInsertMany, TaskInserted};

use super::{Frontend, MAX_TASKS_PER_REQUEST};
use crate::{RunAt, ServiceError, ServiceResult, TaskRequest, metrics, spans};

impl Frontend {
    /// Schedules `tasks` for a caller allowed to: refuses a request of no
    /// tasks or of too many, a payload over the limit, a delay too long and
    /// tasks beyond their lambdas' quotas; else stores them all in one
    /// transaction, and tells the Store Consumer when the first comes due.
    pub(super) async fn store_tasks(
        &self,
        tasks: Vec<TaskRequest>,
    ) -> ServiceResult<Vec<TaskInserted>> {
        if tasks.is_empty() {
            return Err(ServiceError::InvalidArgument("no tasks to schedule".into()));
        }
        if tasks.len() > MAX_TASKS_PER_REQUEST {
            return Err(ServiceError::ResourceExhausted(format!(
                "{} tasks in one request; send at most {MAX_TASKS_PER_REQUEST}",
                tasks.len()
            )));
        }
        let now = self.clock.now();
        let (mut tasks, earliest) = new_tasks(tasks, now)?;
        let spans = schedule_spans(&mut tasks);
        // A continuation's task is created later, by the store, when this
        // one succeeds: it is counted against its own lambda's quota now.
        let mut wanted = BTreeMap::new();
        for task in &tasks {
            *wanted.entry(task.lambda.clone()).or_insert(0) += 1;
            if let Some(then) = &task.continuation {
                *wanted.entry(then.lambda.clone()).or_insert(0) += 1;
            }
        }
        let lambdas: Vec<String> = tasks.iter().map(|task| task.lambda.clone()).collect();
        let admitted = self.quotas.admit(wanted).await?;
        let inserted = match self
            .store
            .task_insert_many(TaskInsertMany { tasks, now })
            .await
        {
            Ok(inserted) => inserted,
            Err(error) => {
                self.quotas.refund(admitted);
                spans.iter().for_each(spans::failed);
                return Err(error.into());
            }
        };
        for (span, task) in spans.iter().zip(&inserted) {
            span.record("messaging.message.id", task.id.as_str());
            span.record("waft.task.id", task.id.as_str());
        }
        count_scheduled(&lambdas, &inserted);
        if let Some(at) = earliest {
            self.due.due(at).await;
        }
        Ok(inserted)
    }
}

/// The tasks to store for `tasks` at `now`, and the earliest time one of
/// them comes due; refuses a payload over the limit, or a delay too long.
fn new_tasks(
    tasks: Vec<TaskRequest>,
    now: Millis,
) -> ServiceResult<(Vec<NewTask>, Option<Millis>)> {
    let mut earliest: Option<Millis> = None;
    let tasks = tasks
        .into_iter()
        .map(|task| {
            check_payload(&task.lambda, task.payload.len())
                .map_err(ServiceError::ResourceExhausted)?;
            let run_at = match task.run_at {
                RunAt::Now => None,
                RunAt::At(at) => Some(at),
                RunAt::After(delay) => {
                    let delay = i64::try_from(delay.as_millis()).map_err(|_| {
                        ServiceError::InvalidArgument(format!("delay {delay:?} is too long"))
                    })?;
                    Some(now.saturating_add(delay))
                }
            };
            let window = task.debounce.map_or(0, |window| {
                i64::try_from(window.as_millis()).unwrap_or(i64::MAX)
            });
            let due = run_at.map_or(now, |at| at.max(now)).saturating_add(window);
            earliest = Some(earliest.map_or(due, |e| e.min(due)));
            Ok(NewTask {
                lambda: task.lambda,
                collection: task.collection,
                priority: task.priority,
                payload: task.payload,
                run_at,
                idempotency_key: task.idempotency_key,
                key: task.key,
                debounce: task.debounce,
                parent_id: task.parent_id,
                version: task.version,
                parent_lease: task.parent_lease,
                continuation: task.then,
                trace: task.trace,
                id: task.id,
            })
        })
        .collect::<ServiceResult<Vec<_>>>()?;
    Ok((tasks, earliest))
}

/// A `schedule` span per task, each a child of the task's trace context
/// (or the root of a new trace), which the task then keeps in its stead:
/// the steps after the store write are the span's children. Untraced,
/// the client's context is kept as it came.
fn schedule_spans(tasks: &mut [NewTask]) -> Vec<tracing::Span> {
    tasks
        .iter_mut()
        .map(|task| {
            let span = spans::schedule(&task.lambda, task.trace.as_ref());
            if let Some(trace) = waft_telemetry::context_of(&span) {
                task.trace = Some(trace);
            }
            span
        })
        .collect()
}

/// Counts the tasks created among `inserted` (of `lambdas`, in order).
/// Counted per lambda, not per task: each count takes the metric family's
/// lock.
fn count_scheduled(lambdas: &[String], inserted: &[TaskInserted]) {
    let mut created: BTreeMap<&str, u64> = BTreeMap::new();
    for (lambda, task) in lambdas.iter().zip(inserted) {
        if task.created {
            *created.entry(lambda).or_default() += 1;
        }
    }
    let scheduled = &metrics::metrics().scheduled;
    for (lambda, count) in created {
        scheduled
            .get_or_create(&metrics::lambda(lambda))
            .inc_by(count);
    }
}
