//! What an execution's lambda reaches outside its instance: its progress
//! note (carried by the watchdog's next heartbeat) and the children it
//! schedules through the Frontend, up to the executor's `max_children`: a
//! lambda scheduling in a loop would otherwise fill the shared store at the
//! speed of its loop.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::UNIX_EPOCH;

use async_trait::async_trait;
use waft_runtime::{ChildRequest, KillSwitch, LeaseLost, ScheduleRejection, TaskHost};

use crate::{FrontendApi, RunAt, ServiceError, TaskRequest, lock};

/// What a running lambda's host calls reach.
///
/// A heartbeat from the lambda records its progress note; the watchdog
/// carries it to the HSC with the next heartbeat. So a lambda may call it
/// as often as it likes, and hears "lease lost" as soon as the watchdog
/// does.
pub(super) struct ExecutionHost {
    pub(super) frontend: Arc<dyn FrontendApi>,
    pub(super) task_id: String,
    /// Children carry it: the store creates them only while this execution
    /// still holds the task (fencing).
    pub(super) lease_token: i64,
    pub(super) kill: KillSwitch,
    pub(super) progress: Mutex<Option<String>>,
    /// Children scheduled so far by this execution.
    pub(super) children: AtomicUsize,
    /// Children it may schedule; each beyond is refused.
    pub(super) max_children: usize,
}

#[async_trait]
impl TaskHost for ExecutionHost {
    async fn heartbeat(&self, progress: Option<String>) -> Result<(), LeaseLost> {
        if let Some(reason) = self.kill.reason() {
            return Err(LeaseLost {
                reason: reason.to_owned(),
            });
        }
        if progress.is_some() {
            *lock(&self.progress) = progress;
        }
        Ok(())
    }

    async fn schedule(&self, child: ChildRequest) -> Result<String, ScheduleRejection> {
        if let Some(reason) = self.kill.reason() {
            return Err(ScheduleRejection::LeaseLost(reason.to_owned()));
        }
        // The n-th child of a task has the same key in every attempt: a
        // retried parent does not schedule its children twice.
        let index = self
            .children
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max_children).then_some(n + 1)
            })
            .map_err(|_| {
                ScheduleRejection::Denied(format!(
                    "an execution may schedule at most {} children (executor.max_children)",
                    self.max_children
                ))
            })?;
        let run_at = match child.not_before {
            None => RunAt::Now,
            Some(at) => RunAt::At(
                at.duration_since(UNIX_EPOCH)
                    .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            ),
        };
        let request = TaskRequest {
            lambda: child.lambda,
            payload: child.payload,
            collection: child.collection,
            priority: child.priority,
            run_at,
            idempotency_key: Some(format!("child:{}:{index}", self.task_id)),
            parent_id: Some(self.task_id.clone()),
            parent_lease: Some(self.lease_token),
            ..TaskRequest::default()
        };
        match self.frontend.task_schedule_many(vec![request]).await {
            Ok(mut inserted) if inserted.len() == 1 => Ok(inserted.remove(0).id),
            Ok(_) => Err(ScheduleRejection::Unavailable(
                "the Frontend gave no answer".into(),
            )),
            Err(ServiceError::Unavailable(message) | ServiceError::Internal(message)) => {
                Err(ScheduleRejection::Unavailable(message))
            }
            // The only precondition of a child insert: the parent's lease.
            Err(ServiceError::FailedPrecondition(message)) => {
                Err(ScheduleRejection::LeaseLost(message))
            }
            Err(ServiceError::PermissionDenied(message)) => Err(ScheduleRejection::Denied(message)),
            Err(error) => Err(ScheduleRejection::Invalid(error.to_string())),
        }
    }
}
