//! The Store Consumer: moves due tasks from the store onto their queues.
//!
//! Each turn takes up to a batch of due tasks (new, retrying, or whose
//! enqueue, claim or heartbeat timed out), which the store marks enqueued in
//! the same transaction, and sends each to the queue of its `<lambda,
//! priority>`. A turn that fills its batch is followed at once by another;
//! otherwise the consumer sleeps until the next task comes due — the store
//! says when, at the end of each turn — or the poll interval passes, or it is
//! woken: the Frontend signals the due time of every task it stores (and
//! the periodic schedules of every occurrence), so neither immediate nor
//! delayed tasks wait for a tick. A lambda with a scheduling quota is paced
//! in the same transaction: its due tasks beyond the quota's rate wait in
//! the store for their own slots, so its backlog never crowds the queues.
//!
//! After each turn the consumer tells the Controllers, through the
//! Frontend, which queues it filled ([`FillSignal`]): a Controller polls a
//! queue when told, not every second.
//!
//! If sending fails, the tasks stay enqueued in the store and come due again
//! after the enqueue timeout: nothing is lost, only delayed.
//!
//! Beside its turns, every consumer materialises periodic schedules
//! ([`Periodic`]) on the same interval, and every few seconds records the
//! backlog's metrics: queue depths and the age of the oldest waiting task.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use waft_queue::{QueueError, QueueKey, QueueMessage, TaskQueue, Turn};
use waft_store::{Millis, StoreError, TaskEnqueueReady, TaskStore};

use crate::fills::FillSignal;
use crate::metrics::{self, QueueLabels};
use crate::{Clock, Periodic, lock, spans};

/// How often the backlog's metrics are recorded.
const BACKLOG_INTERVAL: Duration = Duration::from_secs(5);

/// Settings of a Store Consumer; the `[consumer]` section of a
/// configuration file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConsumerConfig {
    /// The longest the consumer sleeps between turns (default 1 s). It
    /// wakes sooner when the next task comes due, so this bounds only what
    /// a lost due signal costs.
    #[serde(deserialize_with = "waft_core::deserialize_duration")]
    pub poll_interval: Duration,
    /// Tasks taken per turn (default 1000).
    pub batch: u32,
    /// How long an enqueued task may wait to be claimed before it is
    /// enqueued again (default 60 s).
    #[serde(deserialize_with = "waft_core::deserialize_duration")]
    pub enqueue_timeout: Duration,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        Self {
            poll_interval: Duration::from_secs(1),
            batch: 1000,
            enqueue_timeout: Duration::from_secs(60),
        }
    }
}

/// Wakes a consumer for a turn, now or when tasks come due. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Wake(Arc<WakeState>);

#[derive(Debug)]
struct WakeState {
    notify: Notify,
    /// The earliest due time signalled since the consumer last looked;
    /// `Millis::MAX` for none.
    earliest: AtomicI64,
}

impl Default for WakeState {
    fn default() -> Self {
        Self {
            notify: Notify::new(),
            earliest: AtomicI64::new(Millis::MAX),
        }
    }
}

impl Wake {
    /// Asks for a turn now; several calls before the turn make one turn.
    pub fn wake(&self) {
        self.wake_at(Millis::MIN);
    }

    /// Asks for a turn at `at` (Unix milliseconds), when a task comes due,
    /// rather than at the next poll.
    pub fn wake_at(&self, at: Millis) {
        self.0.earliest.fetch_min(at, Ordering::AcqRel);
        self.0.notify.notify_one();
    }

    /// The earliest due time signalled since the last call.
    fn take(&self) -> Option<Millis> {
        let at = self.0.earliest.swap(Millis::MAX, Ordering::AcqRel);
        (at != Millis::MAX).then_some(at)
    }
}

/// What one turn did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PollReport {
    /// Tasks sent to their queues.
    pub sent: usize,
    /// Tasks marked enqueued whose send failed; they come back after the
    /// enqueue timeout.
    pub unsent: usize,
    pub held: u64,
    pub dropped: u64,
    pub dead: u64,
    /// Held back by their lambda's scheduling quota until their slot.
    pub paced: u64,
    /// Held back by their key's rate until their slot.
    pub key_paced: u64,
    /// Parked: as many tasks of their key in flight as their lambda allows.
    pub parked: u64,
    /// The turn filled its batch: more may be due.
    pub full: bool,
    /// When the earliest task not yet due comes due, if the store said.
    pub next_due: Option<Millis>,
}

/// Why a turn failed.
#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The Store Consumer.
pub struct StoreConsumer {
    store: Arc<dyn TaskStore>,
    queue: Arc<dyn TaskQueue>,
    clock: Arc<dyn Clock>,
    config: ConsumerConfig,
    wake: Wake,
    /// Told which queues each turn filled.
    fills: Arc<dyn FillSignal>,
    periodic: Periodic,
    /// Queues whose backlog metrics were recorded, to zero them when empty.
    measured: std::sync::Mutex<BTreeSet<QueueKey>>,
}

impl StoreConsumer {
    /// A consumer moving tasks from `store` to `queue`.
    pub fn new(
        store: Arc<dyn TaskStore>,
        queue: Arc<dyn TaskQueue>,
        clock: Arc<dyn Clock>,
        config: ConsumerConfig,
    ) -> Self {
        let wake = Wake::default();
        let periodic = Periodic::new(
            store.clone(),
            clock.clone(),
            Arc::new(wake.clone()),
            config.poll_interval,
        );
        Self {
            store,
            queue,
            clock,
            config,
            wake,
            fills: Arc::new(()),
            periodic,
            measured: std::sync::Mutex::default(),
        }
    }

    /// Tells `fills` which queues each turn filled.
    pub fn fills(mut self, fills: Arc<dyn FillSignal>) -> Self {
        self.fills = fills;
        self
    }

    /// The handle that wakes this consumer.
    pub fn waker(&self) -> Wake {
        self.wake.clone()
    }

    /// One turn: due tasks from the store onto their queues.
    pub async fn run_once(&self) -> Result<PollReport, ConsumerError> {
        let report = self
            .store
            .task_enqueue_ready(TaskEnqueueReady {
                now: self.clock.now(),
                limit: self.config.batch,
                enqueue_timeout: self.config.enqueue_timeout,
            })
            .await?;
        let full = report.enqueued.len()
            + report.held as usize
            + report.dropped as usize
            + report.dead as usize
            + report.paced as usize
            + report.key_paced as usize
            + report.parked as usize
            >= self.config.batch as usize;
        for ((lambda, limit), count) in &report.limited {
            metrics::metrics()
                .limited
                .get_or_create(&metrics::LimitedLabels {
                    lambda: lambda.clone(),
                    limit: limit.as_str(),
                })
                .inc_by(*count);
        }
        let mut by_queue: BTreeMap<QueueKey, Vec<QueueMessage>> = BTreeMap::new();
        let mut spans: BTreeMap<QueueKey, Vec<tracing::Span>> = BTreeMap::new();
        for task in report.enqueued {
            let key = QueueKey::new(task.lambda, task.priority);
            let span = spans::enqueue(&task.id, &key.lambda, key.priority, task.trace.as_ref());
            // The claim continues from the enqueue's span when traced, else
            // from the context the task keeps.
            let trace = waft_telemetry::context_of(&span).or(task.trace);
            spans.entry(key.clone()).or_default().push(span);
            by_queue.entry(key).or_default().push(QueueMessage {
                task_id: task.id,
                enqueue_token: task.enqueue_token,
                tracestate: trace.as_ref().and_then(|t| t.tracestate.clone()),
                traceparent: trace.map(|t| t.traceparent),
                turn: task.turn.map(|(key, weight)| Turn { key, weight }),
            });
        }
        let mut sent = 0;
        let mut unsent = 0;
        let mut filled = Vec::with_capacity(by_queue.len());
        for (key, messages) in by_queue {
            let count = messages.len();
            match self.queue.queue_send_many(&key, messages).await {
                Ok(()) => {
                    sent += count;
                    metrics::metrics()
                        .enqueued
                        .get_or_create(&QueueLabels {
                            lambda: key.lambda.clone(),
                            priority: key.priority,
                        })
                        .inc_by(count as u64);
                    filled.push(key);
                }
                Err(error) => {
                    unsent += count;
                    log_send_failure(&key, count, &error);
                    spans
                        .get(&key)
                        .into_iter()
                        .flatten()
                        .for_each(spans::failed);
                }
            }
        }
        // The enqueues end with their sends.
        drop(spans);
        if !filled.is_empty() {
            self.fills.filled(&filled).await;
        }
        Ok(PollReport {
            sent,
            unsent,
            held: report.held,
            dropped: report.dropped,
            dead: report.dead,
            paced: report.paced,
            key_paced: report.key_paced,
            parked: report.parked,
            full,
            next_due: report.next_due,
        })
    }

    /// Turns until `shutdown` resolves: at once after a full turn, else
    /// after the poll interval or when woken. A failed turn is logged and
    /// retried at the next interval. Periodic schedules are materialised
    /// alongside.
    pub async fn run(&self, shutdown: impl std::future::Future<Output = ()>) {
        let stop = CancellationToken::new();
        tokio::join!(
            async {
                shutdown.await;
                stop.cancel();
            },
            self.turns(stop.cancelled()),
            self.periodic.run(stop.cancelled()),
            self.measure(stop.cancelled()),
        );
    }

    /// Records the backlog's metrics every few seconds.
    async fn measure(&self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            if let Err(error) = self.record_backlog().await {
                tracing::debug!(%error, "cannot measure the backlog");
            }
            tokio::select! {
                () = &mut shutdown => return,
                () = tokio::time::sleep(BACKLOG_INTERVAL) => {}
            }
        }
    }

    /// Sets the queue-depth and oldest-waiting-task gauges of every queue
    /// with a backlog, and zeroes those of queues whose backlog is gone.
    /// A queue found empty with no backlog is not measured again until it
    /// has one: an idle installation reads no queue's depth.
    pub async fn record_backlog(&self) -> Result<(), StoreError> {
        let now = self.clock.now();
        let backlog = self.store.task_backlog(now).await?;
        let metrics = metrics::metrics();
        let mut keys: BTreeSet<QueueKey> = lock(&self.measured).clone();
        for key in &keys {
            metrics
                .oldest_ready_age
                .get_or_create(&labels(key))
                .set(0.0);
        }
        let mut waiting_keys = BTreeSet::new();
        for waiting in backlog {
            let key = QueueKey::new(waiting.lambda, waiting.priority);
            let age = (now - waiting.oldest_due).max(0) as f64 / 1000.0;
            metrics
                .oldest_ready_age
                .get_or_create(&labels(&key))
                .set(age);
            keys.insert(key.clone());
            waiting_keys.insert(key);
        }
        let mut measured = BTreeSet::new();
        for key in keys {
            match self.queue.queue_depth(&key).await {
                Ok(depth) => {
                    let depth = i64::try_from(depth).unwrap_or(i64::MAX);
                    metrics.queue_depth.get_or_create(&labels(&key)).set(depth);
                    if depth > 0 || waiting_keys.contains(&key) {
                        measured.insert(key);
                    }
                }
                Err(error) => {
                    tracing::debug!(queue = %key, %error, "cannot read the queue depth");
                    measured.insert(key);
                }
            }
        }
        *lock(&self.measured) = measured;
        Ok(())
    }

    async fn turns(&self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            let (full, mut next) = match self.run_once().await {
                Ok(report) => (report.full, report.next_due),
                Err(error) => {
                    tracing::error!(%error, "store consumer turn failed");
                    (false, None)
                }
            };
            if full {
                continue;
            }
            // Sleep until the next task comes due, a signal says one comes
            // due sooner, or the poll interval passes: whichever is first.
            let poll = tokio::time::Instant::now() + self.config.poll_interval;
            loop {
                if let Some(at) = self.wake.take() {
                    next = Some(next.map_or(at, |n| n.min(at)));
                }
                let wait = next.map(|at| {
                    let ms = at.saturating_sub(self.clock.now()).max(0);
                    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
                });
                if wait == Some(Duration::ZERO) {
                    break;
                }
                let until = wait.map_or(poll, |wait| poll.min(tokio::time::Instant::now() + wait));
                tokio::select! {
                    () = &mut shutdown => return,
                    () = self.wake.0.notify.notified() => {}
                    () = tokio::time::sleep_until(until) => break,
                }
            }
        }
    }
}

fn log_send_failure(key: &QueueKey, count: usize, error: &QueueError) {
    tracing::warn!(queue = %key, count, %error, "cannot send to the queue; the tasks come back after the enqueue timeout");
}

fn labels(key: &QueueKey) -> QueueLabels {
    QueueLabels {
        lambda: key.lambda.clone(),
        priority: key.priority,
    }
}
