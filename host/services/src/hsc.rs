//! The Heartbeat & Status Controller: claims, heartbeats and results, on
//! the store, with lease tokens enforced.
//!
//! The HSC is the only writer of execution state. It owns the two timeouts
//! that bring a task back when its executor vanishes: a claimed task must
//! heartbeat within `heartbeat_timeout` of its claim, and a running one
//! within `heartbeat_timeout` of its last heartbeat. One timeout serves
//! both, so [`HeartbeatConfig::validate`]'s rule — an executor cut off from
//! the HSC stops its task before the timeout — covers the claimed state
//! too.

use std::sync::Arc;

use async_trait::async_trait;
use waft_core::TaskStatus;
use waft_store::{
    ClaimedTask, Heartbeat, Refusal, TaskClaimMany, TaskHeartbeatMany, TaskResult,
    TaskSetResultMany, TaskStore,
};

use crate::{Clock, HeartbeatConfig, HscApi, ServiceError, ServiceResult};

/// Requests larger than this are refused: a batch is one transaction.
pub const MAX_BATCH: usize = 10_000;

/// The HSC role.
pub struct Hsc {
    store: Arc<dyn TaskStore>,
    clock: Arc<dyn Clock>,
    heartbeat: HeartbeatConfig,
}

impl Hsc {
    /// An HSC over `store`, with the timing every executor also uses.
    pub fn new(
        store: Arc<dyn TaskStore>,
        clock: Arc<dyn Clock>,
        heartbeat: HeartbeatConfig,
    ) -> Self {
        Self {
            store,
            clock,
            heartbeat,
        }
    }
}

fn check_batch(len: usize, what: &str) -> ServiceResult<()> {
    if len > MAX_BATCH {
        return Err(ServiceError::ResourceExhausted(format!(
            "{len} {what} in one request; send at most {MAX_BATCH}"
        )));
    }
    Ok(())
}

#[async_trait]
impl HscApi for Hsc {
    async fn task_claim_many(
        &self,
        claims: Vec<(String, i64)>,
    ) -> ServiceResult<Vec<Result<ClaimedTask, Refusal>>> {
        check_batch(claims.len(), "claims")?;
        Ok(self
            .store
            .task_claim_many(TaskClaimMany {
                claims,
                now: self.clock.now(),
                claim_timeout: self.heartbeat.heartbeat_timeout,
            })
            .await?)
    }

    async fn task_heartbeat_many(
        &self,
        beats: Vec<Heartbeat>,
    ) -> ServiceResult<Vec<Result<(), Refusal>>> {
        check_batch(beats.len(), "heartbeats")?;
        let metrics = crate::metrics::metrics();
        metrics.heartbeat_calls.inc();
        metrics.heartbeats.inc_by(beats.len() as u64);
        Ok(self
            .store
            .task_heartbeat_many(TaskHeartbeatMany {
                beats,
                now: self.clock.now(),
                heartbeat_timeout: self.heartbeat.heartbeat_timeout,
            })
            .await?)
    }

    async fn task_set_result_many(
        &self,
        results: Vec<TaskResult>,
    ) -> ServiceResult<Vec<Result<TaskStatus, Refusal>>> {
        check_batch(results.len(), "results")?;
        Ok(self
            .store
            .task_set_result_many(TaskSetResultMany {
                results,
                now: self.clock.now(),
            })
            .await?)
    }
}
