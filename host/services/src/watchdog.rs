//! The executor's heartbeat watchdog: the half of "no task runs twice at
//! once" that lives in the executor.
//!
//! While a task runs, the watchdog heartbeats its lease every `interval`.
//! When the HSC answers that the lease is lost, or three heartbeats in a row
//! fail (unreachable, or no answer within `rpc_timeout`), it pulls the
//! execution's kill switch: the instance stops at once and makes no further
//! host call. The store re-enqueues a task only `heartbeat_timeout` after
//! its last successful heartbeat, and [`HeartbeatConfig::validate`] insists
//! that `3 × interval + rpc_timeout < heartbeat_timeout`: the execution is
//! always stopped before anyone else may start the task.
//!
//! That holds while the watchdog gets to run. For when it does not (a
//! process starved of CPU, a blocked thread), the execution's kill switch
//! also carries a fence: an instant just short of when the lease could
//! lapse, counted from when the executor asked for the task — its claim is
//! made after that — ([`HeartbeatConfig::first_fence`]), and
//! moved forward by each acknowledged heartbeat
//! ([`HeartbeatConfig::fence_after_ack`]). The instance checks it on its
//! own thread at every epoch tick and host call, and stops itself there.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::{Instant, MissedTickBehavior};
use waft_runtime::KillSwitch;

/// Consecutive failed heartbeats after which an execution stops itself.
pub const FAILED_HEARTBEATS_TO_STOP: u32 = 3;

/// Heartbeat timing, shared by executors and the HSC; the `[heartbeat]`
/// section of a configuration file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HeartbeatConfig {
    /// Between two heartbeats of one execution (default 2 s).
    #[serde(deserialize_with = "waft_core::deserialize_duration")]
    pub interval: Duration,
    /// The longest a heartbeat may take before it counts as failed
    /// (default 1 s).
    #[serde(deserialize_with = "waft_core::deserialize_duration")]
    pub rpc_timeout: Duration,
    /// How long the store waits after a task's last heartbeat before it
    /// re-enqueues the task (default 10 s); `timeout` in the file.
    #[serde(
        rename = "timeout",
        deserialize_with = "waft_core::deserialize_duration"
    )]
    pub heartbeat_timeout: Duration,
}

impl Default for HeartbeatConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(2),
            rpc_timeout: Duration::from_secs(1),
            heartbeat_timeout: Duration::from_secs(10),
        }
    }
}

/// A heartbeat configuration that would let a task run twice at once.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsafe heartbeat settings: {0}")]
pub struct UnsafeHeartbeat(String);

impl HeartbeatConfig {
    /// Refuses settings under which a stale execution could outlive its
    /// lease.
    pub fn validate(&self) -> Result<(), UnsafeHeartbeat> {
        if self.interval.is_zero() || self.rpc_timeout.is_zero() {
            return Err(UnsafeHeartbeat(
                "heartbeat interval and rpc timeout must be above zero".into(),
            ));
        }
        if self.rpc_timeout > self.interval {
            return Err(UnsafeHeartbeat(format!(
                "rpc timeout ({:?}) must not exceed the heartbeat interval ({:?}), or heartbeats \
                 would pile up",
                self.rpc_timeout, self.interval
            )));
        }
        let worst = self.interval * FAILED_HEARTBEATS_TO_STOP + self.rpc_timeout;
        if worst >= self.heartbeat_timeout {
            return Err(UnsafeHeartbeat(format!(
                "3 × heartbeat interval + rpc timeout = {worst:?} must be below the heartbeat \
                 timeout ({:?}): an executor cut off from the HSC stops its task only after three \
                 failed heartbeats, and the task must not be re-enqueued before that",
                self.heartbeat_timeout
            )));
        }
        Ok(())
    }

    /// How long after asking for work (`NextWork`) a task's instance may
    /// run before a heartbeat is acknowledged: the claim, made after the
    /// request was sent, holds for `heartbeat_timeout`; less one interval and
    /// one RPC timeout of margin. Counted from the request, not from the
    /// task's start, so an executor that stalls between the two cannot
    /// start an instance whose claim has lapsed and been handed out again.
    pub fn first_fence(&self) -> Duration {
        self.heartbeat_timeout
            .saturating_sub(self.interval)
            .saturating_sub(self.rpc_timeout)
    }

    /// How long after sending a heartbeat that was acknowledged the
    /// instance may run: the store keeps the lease for `heartbeat_timeout`
    /// from when it recorded the heartbeat (after it was sent); less one RPC
    /// timeout of margin for clocks.
    pub fn fence_after_ack(&self) -> Duration {
        self.heartbeat_timeout.saturating_sub(self.rpc_timeout)
    }
}

/// Why a heartbeat failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeartbeatFailure {
    /// The HSC says another execution owns the task (or it ended).
    LeaseLost(String),
    /// The HSC could not be reached or failed.
    Unreachable(String),
}

/// Where heartbeats go: the HSC, through whatever transport.
#[async_trait]
pub trait HeartbeatSink: Send + Sync {
    /// Heartbeats one execution's lease, with the latest progress note.
    async fn heartbeat(
        &self,
        task_id: &str,
        lease_token: i64,
        progress: Option<String>,
    ) -> Result<(), HeartbeatFailure>;
}

/// How a watch ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEnd {
    /// The execution finished first.
    Finished,
    /// The watchdog stopped the execution.
    Stopped(String),
}

/// The execution a watchdog heartbeats for.
#[derive(Debug, Clone, Copy)]
pub struct Watched<'a> {
    pub task_id: &'a str,
    /// For the metrics' labels.
    pub lambda: &'a str,
    pub lease_token: i64,
}

/// Heartbeats one execution until `finished` resolves, stopping it through
/// `kill` when its lease is lost or three heartbeats in a row fail.
/// `progress` is read at each heartbeat (the lambda updates it).
pub async fn watch(
    sink: Arc<dyn HeartbeatSink>,
    watched: Watched<'_>,
    config: HeartbeatConfig,
    kill: &KillSwitch,
    progress: impl Fn() -> Option<String>,
    finished: impl std::future::Future<Output = ()>,
) -> WatchEnd {
    let Watched {
        task_id,
        lambda,
        lease_token,
    } = watched;
    tokio::pin!(finished);
    let mut ticks = tokio::time::interval_at(Instant::now() + config.interval, config.interval);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut failures = 0;
    loop {
        tokio::select! {
            () = &mut finished => return WatchEnd::Finished,
            _ = ticks.tick() => {}
        }
        let sent = std::time::Instant::now();
        let beat = sink.heartbeat(task_id, lease_token, progress());
        let why = match tokio::time::timeout(config.rpc_timeout, beat).await {
            Ok(Ok(())) => {
                failures = 0;
                kill.fence_at(sent + config.fence_after_ack());
                continue;
            }
            Ok(Err(HeartbeatFailure::LeaseLost(reason))) => {
                let why = format!("lease lost: {reason}");
                kill.kill(why.clone());
                return WatchEnd::Stopped(why);
            }
            Ok(Err(HeartbeatFailure::Unreachable(error))) => error,
            Err(_) => format!("no answer within {:?}", config.rpc_timeout),
        };
        failures += 1;
        tracing::warn!(task_id, failures, %why, "heartbeat failed");
        crate::metrics::metrics()
            .heartbeat_failures
            .get_or_create(&crate::metrics::lambda(lambda))
            .inc();
        if failures >= FAILED_HEARTBEATS_TO_STOP {
            let why =
                format!("{FAILED_HEARTBEATS_TO_STOP} heartbeats in a row failed, last: {why}");
            kill.kill(why.clone());
            return WatchEnd::Stopped(why);
        }
    }
}
