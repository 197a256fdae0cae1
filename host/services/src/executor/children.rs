//! A lambda's children, written in batches.
//!
//! Each child used to cost the lambda two durable writes in turn, the
//! child's and its journal entry's, so a lambda fanning out 10,000 children
//! waited for 20,000 commits. Now the execution chooses each child's id
//! itself ([`child_id`]: from its task's id, its journal's generation and
//! the child's rank, the same in every attempt that replays the same
//! journal), answers the lambda at once, and writes its children
//! in batches: when a batch is full, once its first child has waited
//! [`LINGER`] (a lambda busy after scheduling does not hold its children
//! back), and before anything the execution does next can be seen outside
//! — a journal write (which every outside call's answer waits for), an
//! outbound request, a read of its children, its result. A child therefore
//! exists before anything that could reveal it does, and one lost with its
//! execution is scheduled again, under the same id, by the next attempt
//! (its idempotency key is its rank too).
//!
//! Only a child the store has no reason to refuse waits for its batch: one
//! of a lambda, collection and priority the store took a child of in this
//! execution, due now, whose payload fits its lambda's `max_payload` (and
//! a batch's bytes), of a lambda with no schedule quota. Any other child is
//! written at once, after the batch, and answered as the store answers. A
//! batch refused all the same (the lambda deleted meanwhile, the lease
//! lost) stops the execution: its lambda was told of children that do not
//! exist.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::time::Duration;

use tokio::sync::{Mutex, Notify};
use tokio::time::Instant;
use waft_runtime::ScheduleRejection;

use super::durable::JournalLink;
use super::host::ExecutionHost;
use crate::{RunAt, ServiceError, TaskRequest};

/// Children one batch holds at most.
const BATCH: usize = 1_000;

/// Payload bytes that make a batch full. The child that crosses it is
/// under it too, so a batch holds less than twice this: well inside one
/// message.
const BATCH_BYTES: usize = 4 << 20;

/// How long a child waits for its batch to fill at most.
const LINGER: Duration = Duration::from_millis(10);

/// An execution's children not yet written.
#[derive(Default)]
pub(super) struct Children {
    batch: Mutex<Batch>,
    /// A child waits in a batch that was empty.
    waiting: Notify,
}

/// The children not yet written, and what the execution knows of what the
/// store takes.
#[derive(Default)]
struct Batch {
    /// Children the lambda was told of, in the order it scheduled them.
    pending: Vec<TaskRequest>,
    bytes: usize,
    /// Where the store took a child of this execution.
    taken: HashSet<Target>,
    /// Per lambda, the largest payload a child may carry without being
    /// written at once; `None` for a lambda with a schedule quota.
    limits: HashMap<String, Option<u64>>,
    /// Set when the store answered a child with another id than the one
    /// chosen: an earlier attempt, of an older release, scheduled it. No
    /// child of this execution then waits for a batch.
    off: bool,
    /// Why a batch could not be written: the execution is over, and
    /// nothing of it may be reported.
    failed: Option<String>,
}

/// What every check of a child by the store depends on, but its payload's
/// size and its time.
#[derive(Hash, PartialEq, Eq)]
struct Target {
    lambda: String,
    collection: Option<String>,
    priority: Option<u8>,
}

impl Target {
    fn of(request: &TaskRequest) -> Self {
        Self {
            lambda: request.lambda.clone(),
            collection: request.collection.clone(),
            priority: request.priority,
        }
    }
}

/// The id of the child of rank `rank` of task `task_id` in its journal's
/// generation `generation`: a ULID with the parent's time and, for its
/// random part, 48 bits of a hash of the parent's id (and generation) then
/// the rank, so a task's children are ordered by rank and every attempt
/// replaying the same journal names each one alike, while a journal
/// started afresh (a new generation; its ranks start again at 0) names new
/// children. Generation 0 hashes the id alone, as ids were named before
/// generations were: a task running across an upgrade keeps its children.
pub(super) fn child_id(task_id: &str, generation: u32, rank: u32) -> String {
    let time = ulid::Ulid::from_string(task_id).map_or(0, |parent| parent.timestamp_ms());
    // FNV-1a: stable across releases and platforms, as ids must be.
    let fnv = |hash: u64, byte: u8| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    let hash = task_id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, fnv);
    let hash = match generation {
        0 => hash,
        _ => generation.to_be_bytes().into_iter().fold(hash, fnv),
    };
    let random = (u128::from(hash >> 16) << 32) | u128::from(rank);
    ulid::Ulid::from_parts(time, random).to_string()
}

impl ExecutionHost {
    /// Schedules `request`, whose id is chosen: answered at once when it
    /// can wait for its batch, else written now.
    pub(super) async fn schedule_child(
        &self,
        request: TaskRequest,
    ) -> Result<String, ScheduleRejection> {
        let mut children = self.children.batch.lock().await;
        let chosen = request.id.clone().unwrap_or_default();
        if self.may_wait(&mut children, &request).await {
            if children.pending.is_empty() {
                self.children.waiting.notify_one();
            }
            children.bytes += request.payload.len();
            children.pending.push(request);
            if children.pending.len() >= BATCH || children.bytes >= BATCH_BYTES {
                self.write_pending(&mut children)
                    .await
                    .map_err(ScheduleRejection::LeaseLost)?;
            }
            return Ok(chosen);
        }
        // After the batch: children reach the store in the order they
        // were scheduled.
        self.write_pending(&mut children)
            .await
            .map_err(ScheduleRejection::LeaseLost)?;
        let target = Target::of(&request);
        let id = self.insert_child(request).await?;
        if id == chosen {
            children.taken.insert(target);
        } else {
            children.off = true;
        }
        Ok(id)
    }

    /// Writes the children waiting for their batch; `Err` (why) when they
    /// could not be, and the execution is then stopped.
    pub(super) async fn write_children(&self) -> Result<(), String> {
        let mut children = self.children.batch.lock().await;
        self.write_pending(&mut children).await
    }

    /// Writes the children waiting for their batch once the first has
    /// waited [`LINGER`]; runs beside the execution, until dropped with it.
    pub(super) async fn write_children_when_due(&self) -> Infallible {
        loop {
            self.children.waiting.notified().await;
            tokio::time::sleep(LINGER).await;
            if self.write_children().await.is_err() {
                // The execution is being stopped, with the reason.
                return std::future::pending().await;
            }
        }
    }

    async fn may_wait(&self, children: &mut Batch, request: &TaskRequest) -> bool {
        // A payload over a batch's bytes goes alone, so no batch is
        // more than twice that.
        if children.off
            || request.run_at != RunAt::Now
            || request.payload.len() > BATCH_BYTES
            || !children.taken.contains(&Target::of(request))
        {
            return false;
        }
        let limit = match children.limits.get(&request.lambda) {
            Some(limit) => *limit,
            None => {
                let limit = self.payload_limit(&request.lambda).await;
                children.limits.insert(request.lambda.clone(), limit);
                limit
            }
        };
        limit.is_some_and(|max| request.payload.len() as u64 <= max)
    }

    /// The largest payload `lambda`'s tasks take; `None` when it has a
    /// schedule quota (the Frontend may refuse its tasks at any time) or
    /// cannot be read now.
    async fn payload_limit(&self, lambda: &str) -> Option<u64> {
        let lambda = self.frontend.lambda_get(lambda, None).await.ok()?;
        let config = lambda.config;
        config
            .quota_per_sec
            .is_none()
            .then(|| config.max_payload.bytes())
    }

    async fn write_pending(&self, children: &mut Batch) -> Result<(), String> {
        if let Some(reason) = &children.failed {
            return Err(reason.clone());
        }
        if children.pending.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut children.pending);
        children.bytes = 0;
        let link = JournalLink {
            hsc: self.hsc.as_ref(),
            kill: &self.kill,
            patience: self.journal_patience,
        };
        // An unreachable Frontend is asked again, as for a journal write;
        // a refusal is final.
        let written = link
            .retrying(Instant::now() + self.journal_patience, || {
                let batch = batch.clone();
                async move {
                    match self.frontend.task_schedule_many(batch).await {
                        Err(error @ (ServiceError::Unavailable(_) | ServiceError::Internal(_))) => {
                            Err(error)
                        }
                        answer => Ok(answer),
                    }
                }
            })
            .await;
        let why = match written {
            Ok(Ok(inserted))
                if inserted
                    .iter()
                    .map(|task| Some(&task.id))
                    .eq(batch.iter().map(|child| child.id.as_ref())) =>
            {
                return Ok(());
            }
            Ok(Ok(_)) => "the store holds some under other ids".to_owned(),
            Ok(Err(error)) => error.to_string(),
            Err(failure) => failure.message().to_owned(),
        };
        let reason = format!(
            "cannot write {} children the lambda was told were scheduled: {why}",
            batch.len()
        );
        if self.kill.kill(reason.clone()) {
            tracing::warn!(task = %self.task_id, lease = self.lease_token, %reason, "stopping the execution");
        }
        children.failed = Some(reason.clone());
        Err(reason)
    }

    /// Writes one child now; its id as the store answers.
    async fn insert_child(&self, request: TaskRequest) -> Result<String, ScheduleRejection> {
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

#[cfg(test)]
mod batching;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_childs_id_is_its_parents_time_and_rank() {
        let parent = "01KB2B3CDE0000000000000000";
        let first = child_id(parent, 0, 0);
        assert_eq!(first, child_id(parent, 0, 0), "the same in every attempt");
        let first = ulid::Ulid::from_string(&first).unwrap();
        let parent_ulid = ulid::Ulid::from_string(parent).unwrap();
        assert_eq!(first.timestamp_ms(), parent_ulid.timestamp_ms());
        let ids: Vec<String> = (0..1_000).map(|rank| child_id(parent, 0, rank)).collect();
        assert!(
            ids.windows(2).all(|pair| pair[0] < pair[1]),
            "ordered by rank"
        );
        assert_ne!(
            child_id("01KB2B3CDE0000000000000001", 0, 0),
            child_id(parent, 0, 0)
        );
        // A parent whose id is no ULID still gives its children ids.
        ulid::Ulid::from_string(&child_id("t", 0, 3)).unwrap();
    }

    #[test]
    fn each_generation_names_its_children_anew_and_the_first_as_before() {
        let parent = "01KB2B3CDE0000000000000000";
        // The ids generation 0 names are those named before generations.
        assert_eq!(child_id(parent, 0, 0), "01KB2B3CDEDJEG3383RM000000");
        assert_eq!(child_id(parent, 0, 7), "01KB2B3CDEDJEG3383RM000007");
        let by_generation: Vec<String> = (0..100).map(|g| child_id(parent, g, 0)).collect();
        let distinct: std::collections::HashSet<_> = by_generation.iter().collect();
        assert_eq!(distinct.len(), by_generation.len(), "{by_generation:?}");
        assert_eq!(child_id(parent, 3, 5), child_id(parent, 3, 5));
        let ranks: Vec<String> = (0..100).map(|rank| child_id(parent, 1, rank)).collect();
        assert!(ranks.windows(2).all(|pair| pair[0] < pair[1]));
    }
}
