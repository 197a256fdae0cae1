//! An Executor's settings (the `[executor]` section of a configuration
//! file) and the checks they pass before it starts.
//!
//! Apart from the Executor itself because a reader checking what a setting
//! does, or why one is refused, needs none of the run loop.

use std::path::PathBuf;
use std::time::Duration;

use crate::HeartbeatConfig;

/// Settings of an Executor; the `[executor]` section of a configuration
/// file (but `heartbeat`, which is the `[heartbeat]` section).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExecutorConfig {
    /// The lambdas it runs; every lambda when empty.
    pub lambdas: Vec<String>,
    /// Tasks running at once, all lambdas together (default 256).
    pub max_tasks: usize,
    /// Heartbeat timing; must match the HSC's.
    #[serde(skip)]
    pub heartbeat: HeartbeatConfig,
    /// How long one `NextWork` call waits for work (default 1 s).
    #[serde(deserialize_with = "waft_core::deserialize_duration")]
    pub next_work_wait: Duration,
    /// How often it re-reads the lambdas' settings besides the Frontend's
    /// word of a deploy or rollback (default 30 s): bounds what a lost word
    /// costs.
    #[serde(deserialize_with = "waft_core::deserialize_duration")]
    pub refresh: Duration,
    /// On shutdown, how long running tasks may finish before they are
    /// stopped (default 10 s). A stopped task runs again elsewhere.
    #[serde(deserialize_with = "waft_core::deserialize_duration")]
    pub shutdown_grace: Duration,
    /// A file recording when each execution starts and ends, if any
    /// (appended to; see [`ExecutionJournal`](crate::ExecutionJournal)).
    pub journal: Option<PathBuf>,
    /// Lambda versions kept loaded at once, the least recently used
    /// forgotten first (default 64). A forgotten version's next task loads
    /// it again from its compiled artifact.
    pub loaded_versions: usize,
    /// Children one task may schedule (default 10,000); beyond, each is
    /// refused (see `host`). A child's rank counts the task's children
    /// across its attempts (replayed ones included) and is its key, so this
    /// bounds a task's children in all.
    pub max_children: usize,
    /// A lambda blocked on nothing but its own timers (a sleep) for longer
    /// than this is suspended: its instance dropped, its slot freed, its
    /// task waiting in the store until the wait is over, then resumed by
    /// replaying its journal (default 1 s). Shorter waits are waited out in
    /// the instance; 0 suspends none. Must be under the heartbeat timeout.
    #[serde(deserialize_with = "waft_core::deserialize_duration")]
    pub suspend_after: Duration,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        Self {
            lambdas: Vec::new(),
            max_tasks: 256,
            heartbeat: HeartbeatConfig::default(),
            next_work_wait: Duration::from_secs(1),
            refresh: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(10),
            journal: None,
            loaded_versions: 64,
            max_children: 10_000,
            suspend_after: Duration::from_secs(1),
        }
    }
}

impl ExecutorConfig {
    /// Refuses settings that cannot work or would let a task run twice at
    /// once.
    pub fn validate(&self) -> Result<(), String> {
        self.heartbeat.validate().map_err(|e| e.to_string())?;
        if self.max_tasks == 0 {
            return Err("executor max_tasks must be above zero".into());
        }
        if self.refresh.is_zero() {
            return Err("executor refresh interval must be above zero".into());
        }
        if self.suspend_after >= self.heartbeat.heartbeat_timeout {
            return Err(format!(
                "executor suspend_after ({:?}) must be under the heartbeat timeout ({:?}): a \
                 longer wait would hold its instance past the point the task is thought lost",
                self.suspend_after, self.heartbeat.heartbeat_timeout
            ));
        }
        if self.loaded_versions == 0 {
            return Err("executor loaded_versions must be above zero".into());
        }
        Ok(())
    }
}
