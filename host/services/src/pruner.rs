//! The pruner: deletes ended tasks once their retention has passed.
//!
//! An installation that runs for months would otherwise keep every task,
//! attempt, log and journal it ever ran. Every Store Consumer runs a
//! pruner, but one at a time prunes: each turn it takes (or renews) the
//! store's `pruner` duty, a lease that lapses if its holder dies, and only
//! the holder deletes. A turn deletes the tasks past their retention in
//! bounded batches (the store's [`TaskPrune`]), oldest ended first, and
//! after each full batch pauses, so the pipeline's own statements always
//! find the store free in between.
//!
//! Pruning yields to the pipeline: working half the time through a backlog
//! beside the pipeline benchmark, the pruner took 29 % of its throughput.
//! While the pipeline keeps up (no due task has waited to start longer
//! than [`BEHIND`]), the pause after a batch is as long as the batch took:
//! the pruner works half the time, and deletes far faster than tasks end.
//! While due tasks wait, it works one part of time in [`YIELDING`], and the
//! backlog of ended tasks it leaves is deleted once the burst is over.
//! Beside SQLite, whose one writer every write goes through, it also waits
//! after each batch for that writer to have idled a quarter as long as the
//! batch took, so it yields to writes that make no task wait (a flood of
//! tasks held behind a gate) too. The idle it waits for is short because
//! idle moments are rare just after a batch, even well below the peak: the
//! writer first catches up with what queued behind the batch, and its group
//! commit keeps it busy while each group waits for its fsync and the next
//! one gathers (at half of the peak it idled about a tenth of the time in
//! the pauses). A quarter of the batch lets the pruner delete some 60 %
//! faster than tasks end there. docs/benchmarks/idle-and-retention.md has what it
//! costs the pipeline.
//!
//! How long each end is kept is the installation's (`[retention]`), or a
//! lambda's own where its deploy set one; dead letters are never pruned
//! (an operator redrives or purges them).
//!
//! The holder also deletes the queues of deleted lambdas from the queue
//! service: the store lists them (a lambda's deletion cannot reach SQS in
//! its transaction) until each is done, so a pruner that dies halfway
//! leaves the rest to the next holder.
//!
//! The pruner's holder also keeps the task history ([`crate::history`]):
//! once a minute it samples each lambda's queue depth (tasks due and
//! waiting to start) into the history's minute, and it deletes the
//! history's minutes older than `[retention] history` (default 7 days).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use waft_core::lambda::LambdaConfig;
use waft_core::retention::{End, Keep, Retention};
use waft_queue::{QueueKey, TaskQueue};
use waft_store::{
    DepthSample, DutyTake, HistoryDepth, HistoryPrune, Millis, StoreError, TaskPrune, TaskStore,
    minute_of,
};

use crate::Clock;
use crate::metrics::metrics;

/// The duty's name in the store.
const DUTY: &str = "pruner";
/// The shortest pause between two full batches.
const MIN_PAUSE: Duration = Duration::from_millis(10);
/// The pipeline is behind while a due task has waited to start longer
/// than this (ms): the pruner then yields to it.
pub const BEHIND: Millis = 50;
/// While the pipeline is behind, the pruner works one part of time in
/// this many.
pub const YIELDING: u32 = 40;
/// Deleted lambdas whose queues one turn deletes, at most.
const RETIRED_PER_TURN: u32 = 100;

/// How long ended tasks are kept, and how the pruner works; the
/// `[retention]` section of a configuration file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// Tasks that succeeded (default 24h; a duration or `forever`).
    #[serde(deserialize_with = "deserialize_keep")]
    pub success: Keep,
    /// Tasks that failed for good (default 7d).
    #[serde(deserialize_with = "deserialize_keep")]
    pub fatal: Keep,
    /// Tasks a drop gate ended (default 24h).
    #[serde(deserialize_with = "deserialize_keep")]
    pub dropped: Keep,
    /// Tasks cancelled (default 24h).
    #[serde(deserialize_with = "deserialize_keep")]
    pub cancelled: Keep,
    /// Tasks deleted per batch (default 250: a batch holds SQLite's
    /// writer some 10 ms).
    pub batch: u32,
    /// How often the pruner looks for tasks past their retention
    /// (default 10 s).
    #[serde(deserialize_with = "waft_core::deserialize_duration")]
    pub interval: Duration,
    /// How long the task history's minutes (the dashboard's charts) are
    /// kept (default 7d).
    #[serde(deserialize_with = "waft_core::deserialize_duration")]
    pub history: Duration,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        let kept = Retention::installation_default();
        let keep = |end| kept.get(end).unwrap_or(Keep::Forever);
        Self {
            success: keep(End::Success),
            fatal: keep(End::Fatal),
            dropped: keep(End::Dropped),
            cancelled: keep(End::Cancelled),
            batch: 250,
            interval: Duration::from_secs(10),
            history: Duration::from_secs(7 * 24 * 3600),
        }
    }
}

impl RetentionConfig {
    /// The installation's retention of every end.
    pub fn retention(&self) -> Retention {
        let mut retention = Retention::default();
        retention.set(End::Success, self.success);
        retention.set(End::Fatal, self.fatal);
        retention.set(End::Dropped, self.dropped);
        retention.set(End::Cancelled, self.cancelled);
        retention
    }

    /// Refuses settings that cannot work.
    pub fn validate(&self) -> Result<(), String> {
        if self.batch == 0 {
            return Err("batch must be at least 1".into());
        }
        if self.interval.is_zero() {
            return Err("interval must be more than 0 s".into());
        }
        if self.history < Duration::from_secs(3600) {
            return Err(
                "history must be at least 1h: the dashboard's charts show the last hour".into(),
            );
        }
        Ok(())
    }
}

/// What the pause after a batch that took `took` waits for.
#[derive(Debug, Clone, Copy)]
struct Rest {
    /// At least this long: as long as the batch (and [`MIN_PAUSE`]).
    least: Duration,
    /// At most this long: the pruner works one part of time in
    /// [`YIELDING`].
    longest: Duration,
    /// Beside a store with one writer, until that writer has been idle
    /// this long since the batch ended: a quarter as long as the batch
    /// took (not as long as the pause's floor: a short batch is no reason
    /// to wait for more of a busy writer's rare idle moments).
    idle: Duration,
}

impl Rest {
    fn after(took: Duration) -> Self {
        let least = took.max(MIN_PAUSE);
        Self {
            least,
            longest: least * (YIELDING - 1),
            idle: took / 4,
        }
    }

    /// Whether, `elapsed` after the batch ended, the store's one writer
    /// has left the pruner its share: it has been idle (not `busy`) long
    /// enough, or the pruner has waited as long as it ever yields.
    fn writer_rested(&self, elapsed: Duration, busy: Duration) -> bool {
        elapsed.saturating_sub(busy) >= self.idle || elapsed >= self.longest
    }
}

/// Sleeps `duration`; false if `stop` came first.
async fn pause(stop: &CancellationToken, duration: Duration) -> bool {
    tokio::select! {
        () = stop.cancelled() => false,
        () = tokio::time::sleep(duration) => true,
    }
}

fn deserialize_keep<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Keep, D::Error> {
    let text = <String as serde::Deserialize>::deserialize(deserializer)?;
    Keep::parse(&text).map_err(serde::de::Error::custom)
}

/// Deletes ended tasks past their retention, one pruner at a time.
pub struct Pruner {
    store: Arc<dyn TaskStore>,
    /// Where deleted lambdas' queues are deleted, when this process has
    /// the queues.
    queue: Option<Arc<dyn TaskQueue>>,
    clock: Arc<dyn Clock>,
    config: RetentionConfig,
    /// Who this pruner is, to the duty.
    holder: String,
    /// The last minute whose queue depth this pruner sampled.
    sampled: std::sync::Mutex<Option<Millis>>,
}

impl Pruner {
    pub fn new(store: Arc<dyn TaskStore>, clock: Arc<dyn Clock>, config: RetentionConfig) -> Self {
        Self {
            store,
            queue: None,
            clock,
            config,
            holder: waft_store::new_id(),
            sampled: std::sync::Mutex::new(None),
        }
    }

    /// Deletes deleted lambdas' queues from `queue` too.
    pub fn with_queue(mut self, queue: Arc<dyn TaskQueue>) -> Self {
        self.queue = Some(queue);
        self
    }

    /// Prunes every `interval` until `stop`.
    pub async fn run(&self, stop: CancellationToken) {
        loop {
            if let Err(error) = self.run_once(&stop).await {
                tracing::warn!(%error, "pruning failed; trying again at the next turn");
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(self.config.interval) => {}
            }
        }
    }

    /// One turn: if this pruner holds the duty, deletes the queues of
    /// deleted lambdas and every task past its retention, batch by batch.
    /// Returns how many tasks it deleted.
    pub async fn run_once(&self, stop: &CancellationToken) -> Result<u64, StoreError> {
        if !self.take_duty().await? {
            return Ok(0);
        }
        self.retire_queues().await?;
        self.keep_history().await?;
        let mut renewed = Instant::now();
        let mut deleted = 0;
        loop {
            let started = Instant::now();
            let pruned = self
                .store
                .task_prune(TaskPrune {
                    now: self.clock.now(),
                    retention: self.config.retention(),
                    limit: self.config.batch,
                })
                .await?;
            deleted += pruned.tasks;
            metrics().pruned.inc_by(pruned.tasks);
            if !pruned.more {
                return Ok(deleted);
            }
            if renewed.elapsed() >= self.config.interval {
                if !self.take_duty().await? {
                    return Ok(deleted);
                }
                renewed = Instant::now();
            }
            if !self.rest(stop, started.elapsed()).await? {
                return Ok(deleted);
            }
        }
    }

    /// The pause after a batch that took `took`; false if `stop` came
    /// first. At least as long as the batch, so the pruner works half the
    /// time at most. Whether the pipeline is behind is asked after that,
    /// just before the next batch, so a burst that began meanwhile is
    /// yielded to at once: then the pause lasts until the pruner has worked
    /// one part of time in [`YIELDING`]. Beside a store with one writer
    /// (SQLite), the pause also lasts until that writer has been idle a
    /// quarter as long as the batch took: the pruner yields to writes that
    /// make no task wait (a flood of tasks held behind a gate) as to
    /// waiting tasks.
    async fn rest(&self, stop: &CancellationToken, took: Duration) -> Result<bool, StoreError> {
        let since = Instant::now();
        let rest = Rest::after(took);
        let busy_before = self.store.writer_busy();
        if !pause(stop, rest.least).await {
            return Ok(false);
        }
        if self.behind().await? {
            tracing::debug!(?took, "the pipeline is behind: the pruner yields");
            return Ok(pause(stop, rest.longest.saturating_sub(since.elapsed())).await);
        }
        let Some(busy_before) = busy_before else {
            return Ok(true);
        };
        let step = rest.idle.max(Duration::from_millis(1));
        loop {
            let busy = self.store.writer_busy().unwrap_or_default();
            if rest.writer_rested(since.elapsed(), busy.saturating_sub(busy_before)) {
                tracing::debug!(?took, rested = ?since.elapsed(), "the writer rested");
                return Ok(true);
            }
            if !pause(stop, step).await {
                return Ok(false);
            }
        }
    }

    /// Whether the pipeline is behind: a task due to start (not held by a
    /// gate) has waited longer than [`BEHIND`]. Tasks a quota paces or a
    /// lambda's concurrency keeps waiting count too: the store cannot tell
    /// them from tasks the installation is too busy to start.
    pub async fn behind(&self) -> Result<bool, StoreError> {
        let now = self.clock.now();
        let backlog = self.store.task_backlog(now).await?;
        Ok(backlog.iter().any(|b| now - b.oldest_due > BEHIND))
    }

    /// Deletes the queues of deleted lambdas, every priority's; a lambda
    /// whose queues cannot all be deleted now is tried again next turn.
    async fn retire_queues(&self) -> Result<(), StoreError> {
        let Some(queue) = &self.queue else {
            return Ok(());
        };
        for lambda in self.store.queue_retired(RETIRED_PER_TURN).await? {
            let mut failed = None;
            for priority in 0..LambdaConfig::MAX_PRIORITIES {
                if let Err(error) = queue.queue_delete(&QueueKey::new(&lambda, priority)).await {
                    failed = Some(error);
                }
            }
            match failed {
                None => {
                    self.store.queue_retired_done(&lambda).await?;
                    tracing::info!(lambda, "deleted the queues of a deleted lambda");
                }
                Some(error) => {
                    tracing::warn!(lambda, %error, "cannot delete a deleted lambda's queues; trying again next turn");
                }
            }
        }
        Ok(())
    }

    /// Samples the queue depth once a minute, and deletes the history's
    /// minutes past its retention.
    pub async fn keep_history(&self) -> Result<(), StoreError> {
        let now = self.clock.now();
        let minute = minute_of(now);
        if *crate::lock(&self.sampled) == Some(minute) {
            return Ok(());
        }
        // Only the lambdas with tasks waiting, and a mark that the minute
        // was sampled (no lambda is named ""): an idle lambda reads as 0
        // without a row of its own, so a thousand idle lambdas cost no
        // thousand rows a minute.
        let mut samples = vec![DepthSample {
            lambda: String::new(),
            minute,
            depth: 0,
        }];
        for stats in self.store.lambda_stats(now, now).await? {
            let depth = stats.ready.iter().map(|d| d.count).sum();
            if depth > 0 {
                samples.push(DepthSample {
                    lambda: stats.lambda,
                    minute,
                    depth,
                });
            }
        }
        self.store.history_depth(HistoryDepth { samples }).await?;
        let kept = i64::try_from(self.config.history.as_millis()).unwrap_or(i64::MAX);
        self.store
            .history_prune(HistoryPrune {
                before: minute.saturating_sub(kept),
            })
            .await?;
        *crate::lock(&self.sampled) = Some(minute);
        Ok(())
    }

    /// Takes or renews the duty for three intervals: a holder that dies is
    /// replaced within them.
    async fn take_duty(&self) -> Result<bool, StoreError> {
        self.store
            .duty_take(DutyTake {
                name: DUTY.into(),
                holder: self.holder.clone(),
                now: self.clock.now(),
                lease_ms: u64::try_from(self.config.interval.as_millis() * 3).unwrap_or(u64::MAX),
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Beside an idle writer, the pruner's pause ends once the writer has
    /// idled a quarter of the batch; beside one kept busy, only at the
    /// yielding pace; beside one busy most of the time, once its idle
    /// moments add up.
    #[test]
    fn the_writer_rests_once_it_has_idled_a_quarter_of_the_batch() {
        let rest = Rest::after(20 * MS);
        assert!(!rest.writer_rested(4 * MS, Duration::ZERO));
        assert!(rest.writer_rested(5 * MS, Duration::ZERO));

        let longest = 20 * MS * (YIELDING - 1);
        assert!(!rest.writer_rested(longest - MS, longest - MS));
        assert!(rest.writer_rested(longest, longest));

        assert!(!rest.writer_rested(40 * MS, 36 * MS));
        assert!(rest.writer_rested(40 * MS, 35 * MS));
    }

    /// A batch shorter than the shortest pause still pauses that long,
    /// but the writer's idle time it waits for is a quarter of the
    /// batch's own time: the pause's floor is no reason to wait for more
    /// of a busy writer's idle moments (beside SQLite at half load, that
    /// cut the pruner's pace to barely above the pace tasks end).
    #[test]
    fn a_short_batch_waits_for_a_quarter_of_its_own_time() {
        let rest = Rest::after(4 * MS);
        assert_eq!(rest.least, MIN_PAUSE);
        assert_eq!(rest.longest, MIN_PAUSE * (YIELDING - 1));
        assert_eq!(rest.idle, MS);
        assert!(rest.writer_rested(12 * MS, 11 * MS));
        assert!(!rest.writer_rested(12 * MS, 11 * MS + MS / 2));
    }
}
