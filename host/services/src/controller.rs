//! The Controller: between a host's queues and its executors.
//!
//! For every `<lambda, priority>` it serves, a poller long-polls the queue
//! into a bounded local buffer: a backlog at one priority fills only its own
//! buffer, so it never stands in front of another priority's tasks; and a
//! fair lambda's buffer hands its messages out in turns between keys, as
//! the in-process queue does (SQS carries no turns: its messages come in
//! its order).
//!
//! A poller polls only when told, so that an idle Controller costs nothing
//! per lambda deployed: it is told when the Store Consumer filled its queue
//! ([`crate::fills`], followed through the Frontend), and then receives as
//! long as the queue yields messages — waiting for room while its buffer is
//! full — and stops at the first empty answer. What no fill announces — a
//! lost signal, a message that comes back after its visibility timeout
//! because the Controller that received it died — the sweep finds: every
//! `sweep` interval, and whenever the fills may have been missed, one call
//! asks the store's backlog which `<lambda, priority>` have tasks due that
//! have not started, and their pollers are told. (A task whose message is
//! lost altogether is enqueued again after the consumer's enqueue timeout,
//! and that fill is announced.)
//!
//! An
//! executor's `NextWork` takes from the buffers of the lambdas it has room
//! for, highest priority first, and the Controller claims the tasks at the
//! HSC before answering: only claimed tasks are handed out. A message whose
//! claim is refused (a duplicate, a task cancelled meanwhile) is dropped; a
//! message that could not be claimed at all (HSC unreachable) is left
//! unacknowledged and the queue delivers it again.
//!
//! A hand-out is cut by bytes as well as by count (`batch`): the
//! HSC's answer to the claims, and the answer to `NextWork`, carry the
//! tasks' payloads. A message says nothing of its payload's size, so each
//! is counted at its lambda's `max_payload`: a hand-out asks for no more
//! than one message carries, and a task at the largest payload goes alone.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{Notify, Semaphore};
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;
use waft_core::limits::ITEM_OVERHEAD;
use waft_core::{ByteSize, LambdaConfig, TraceContext};
use waft_queue::{Delivery, QueueKey, TaskQueue, Turns};
use waft_store::{ClaimedTask, Refusal};

use crate::batch::{Budget, Filling};
use crate::{
    ControllerApi, FrontendApi, HscApi, LambdaSlots, NextWork, ServiceError, ServiceResult, lock,
    spans,
};

/// The longest a `NextWork` call may wait.
pub const MAX_NEXT_WORK_WAIT: Duration = Duration::from_secs(30);
/// The most tasks one `NextWork` answer carries.
pub const MAX_NEXT_WORK_TASKS: usize = 1000;

/// Settings of a Controller; the `[controller]` section of a
/// configuration file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ControllerConfig {
    /// The lambdas whose queues it polls; every lambda when empty.
    pub lambdas: Vec<String>,
    /// Messages buffered per `<lambda, priority>` (default 256).
    pub buffer: usize,
    /// Messages asked for per receive (default 10, the most SQS allows;
    /// not in the file).
    #[serde(skip)]
    pub receive_batch: usize,
    /// How long one receive waits for messages (default 1 s; at most 20 s
    /// on SQS). A poller told of a fill receives until an answer is empty,
    /// so this is also how long it lingers on a queue after its last
    /// message.
    #[serde(deserialize_with = "waft_core::deserialize_duration")]
    pub receive_wait: Duration,
    /// How often it lists the lambdas besides the Frontend's word of a
    /// deploy (default 30 s): bounds what a lost word costs.
    #[serde(deserialize_with = "waft_core::deserialize_duration")]
    pub refresh: Duration,
    /// How often it asks the store's backlog which queues hold messages no
    /// fill announced (default 5 s): bounds what a lost fill signal or a
    /// redelivery after a visibility timeout costs.
    #[serde(deserialize_with = "waft_core::deserialize_duration")]
    pub sweep: Duration,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            lambdas: Vec::new(),
            buffer: 256,
            receive_batch: 10,
            receive_wait: Duration::from_secs(1),
            refresh: Duration::from_secs(30),
            sweep: Duration::from_secs(5),
        }
    }
}

impl ControllerConfig {
    /// Refuses settings that cannot work.
    pub fn validate(&self) -> Result<(), String> {
        if self.buffer == 0 || self.receive_batch == 0 {
            return Err("controller buffer and receive batch must be above zero".into());
        }
        if self.receive_wait > Duration::from_secs(20) {
            return Err(format!(
                "controller receive wait is {:?}; queues long-poll for at most 20 s",
                self.receive_wait
            ));
        }
        if self.refresh.is_zero() || self.sweep.is_zero() {
            return Err("controller refresh and sweep intervals must be above zero".into());
        }
        Ok(())
    }
}

/// The buffer of one queue, the room its poller may fill, and how its
/// poller is told to poll.
struct Buffer {
    /// In weighted turns between the keys of a fair lambda.
    deliveries: Turns<Delivery>,
    room: Arc<Semaphore>,
    told: Arc<Notify>,
}

/// The pollers running, and which lambda's each is: a lambda no longer
/// listed (deleted) has its pollers stopped and its buffers dropped.
#[derive(Default)]
struct Pollers {
    running: JoinSet<()>,
    of: HashMap<String, Vec<AbortHandle>>,
}

/// The Controller role. Cheap to clone.
#[derive(Clone)]
pub struct Controller {
    inner: Arc<Inner>,
}

struct Inner {
    queue: Arc<dyn TaskQueue>,
    hsc: Arc<dyn HscApi>,
    frontend: Arc<dyn FrontendApi>,
    config: ControllerConfig,
    /// Per lambda, per priority (the index).
    buffers: Mutex<HashMap<String, Vec<Buffer>>>,
    /// Messages in the buffers, all queues together, changed under the
    /// buffers' lock: a `NextWork` with nothing to take returns without
    /// reading its slots, so an idle poll naming a thousand lambdas costs
    /// its decoding alone.
    held: AtomicUsize,
    /// Queues told to poll before their lambda was discovered: told when
    /// their poller starts.
    pending: Mutex<HashSet<QueueKey>>,
    /// What a claimed task of each lambda may weigh in a hand-out, by its
    /// `max_payload`.
    weights: Mutex<HashMap<String, usize>>,
    /// Messages arrived in some buffer.
    arrived: Notify,
    /// An executor asked for a lambda with no poller yet.
    discover: Notify,
    /// Where the next hand-out starts among the lambdas asked for.
    turn: AtomicUsize,
}

impl Controller {
    /// A Controller taking messages from `queue`, claiming at `hsc`, and
    /// learning of lambdas from `frontend`.
    pub fn new(
        queue: Arc<dyn TaskQueue>,
        hsc: Arc<dyn HscApi>,
        frontend: Arc<dyn FrontendApi>,
        config: ControllerConfig,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                queue,
                hsc,
                frontend,
                config,
                buffers: Mutex::default(),
                held: AtomicUsize::new(0),
                pending: Mutex::default(),
                weights: Mutex::default(),
                arrived: Notify::new(),
                discover: Notify::new(),
                turn: AtomicUsize::new(0),
            }),
        }
    }

    /// Messages of `lambda` (all priorities) in this Controller's buffers:
    /// what one `NextWork` could hand out at once.
    pub fn buffered(&self, lambda: &str) -> usize {
        lock(&self.inner.buffers)
            .get(lambda)
            .map_or(0, |levels| levels.iter().map(|b| b.deliveries.len()).sum())
    }

    /// Whether it polls `lambda`'s queues when told to: it was listed at
    /// the last look, and is served here.
    pub fn serves(&self, lambda: &str) -> bool {
        lock(&self.inner.buffers).contains_key(lambda)
    }

    /// Serves until `shutdown` resolves: starts a poller for each `<lambda,
    /// priority>` as soon as the Frontend reports a deploy, and tells the
    /// pollers which queues to poll.
    pub async fn run(&self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut pollers = Pollers::default();
        let changed = Arc::new(Notify::new());
        let following = tokio::spawn(crate::changes::follow(
            self.inner.frontend.clone(),
            changed.clone(),
        ));
        let inner = self.inner.clone();
        let telling = tokio::spawn(async move { inner.follow_fills().await });
        loop {
            if let Err(error) = self.discover(&mut pollers).await {
                tracing::warn!(%error, "controller cannot list lambdas");
            }
            tokio::select! {
                () = &mut shutdown => break,
                () = self.inner.discover.notified() => {}
                () = changed.notified() => {}
                () = tokio::time::sleep(self.inner.config.refresh) => {}
            }
        }
        following.abort();
        telling.abort();
        pollers.running.shutdown().await;
    }

    /// Starts pollers for the queues of lambdas (or priority levels) new
    /// since the last look; a poller told before it started polls at once.
    /// Stops those of lambdas no longer listed.
    async fn discover(&self, pollers: &mut Pollers) -> ServiceResult<()> {
        let lambdas = self.inner.frontend.lambda_list().await?;
        let served = &self.inner.config.lambdas;
        let mut new_keys = Vec::new();
        {
            let mut buffers = lock(&self.inner.buffers);
            let mut weights = lock(&self.inner.weights);
            let mut pending = lock(&self.inner.pending);
            let listed: HashSet<&str> = lambdas.iter().map(|l| l.name.as_str()).collect();
            buffers.retain(|name, levels| {
                let kept = listed.contains(name.as_str());
                if !kept {
                    let dropped: usize = levels.iter().map(|b| b.deliveries.len()).sum();
                    self.inner.held.fetch_sub(dropped, Ordering::Relaxed);
                    tracing::debug!(lambda = %name, "no longer listed; its queues are not polled");
                    weights.remove(name);
                    for poller in pollers.of.remove(name).unwrap_or_default() {
                        poller.abort();
                    }
                }
                kept
            });
            for lambda in lambdas {
                if !served.is_empty() && !served.contains(&lambda.name) {
                    continue;
                }
                weights.insert(lambda.name.clone(), weight(lambda.config.max_payload));
                let levels = buffers.entry(lambda.name.clone()).or_default();
                while levels.len() < usize::from(lambda.config.priorities) {
                    let key = QueueKey::new(&lambda.name, levels.len() as u8);
                    let room = Arc::new(Semaphore::new(self.inner.config.buffer));
                    let told = Arc::new(Notify::new());
                    if pending.remove(&key) {
                        told.notify_one();
                    }
                    new_keys.push((key, room.clone(), told.clone()));
                    levels.push(Buffer {
                        deliveries: Turns::default(),
                        room,
                        told,
                    });
                }
            }
        }
        // Reaps the stopped ones.
        while pollers.running.try_join_next().is_some() {}
        for (key, room, told) in new_keys {
            tracing::debug!(queue = %key, "serving");
            let inner = self.inner.clone();
            let lambda = key.lambda.clone();
            let poller = pollers
                .running
                .spawn(async move { inner.poll(key, room, told).await });
            pollers.of.entry(lambda).or_default().push(poller);
        }
        Ok(())
    }
}

impl Inner {
    /// Tells the pollers of the queues the consumer fills, as the Frontend
    /// reports them, and sweeps the backlog every `sweep` interval and
    /// whenever the Frontend says fills may have been missed (at the first
    /// answer, too); forever.
    async fn follow_fills(&self) {
        let mut seen = 0;
        let mut failures = 0u32;
        let mut sweep_at = Instant::now() + self.config.sweep;
        loop {
            let wait = sweep_at.saturating_duration_since(Instant::now());
            if wait.is_zero() {
                self.sweep().await;
                sweep_at = Instant::now() + self.config.sweep;
                continue;
            }
            match self.frontend.queue_filled(seen, wait).await {
                Ok(fills) => {
                    failures = 0;
                    seen = fills.generation;
                    for (lambda, priority) in fills.queues {
                        self.tell(QueueKey::new(lambda, priority));
                    }
                    if fills.missed {
                        self.sweep().await;
                        sweep_at = Instant::now() + self.config.sweep;
                    }
                }
                Err(error) => {
                    failures += 1;
                    if failures == 1 {
                        tracing::warn!(%error, "cannot follow the queues' fills; sweeping the backlog until the Frontend answers");
                    }
                    let pause = Duration::from_millis(100 << failures.min(5));
                    tokio::time::sleep(pause.min(wait)).await;
                }
            }
        }
    }

    /// Tells the pollers of every queue with tasks due that have not
    /// started: one call, whatever the number of lambdas.
    async fn sweep(&self) {
        match self.frontend.queue_backlog().await {
            Ok(backlog) => {
                for waiting in backlog {
                    self.tell(QueueKey::new(waiting.lambda, waiting.priority));
                }
            }
            Err(error) => {
                tracing::debug!(%error, "cannot sweep the backlog; sweeping again later");
            }
        }
    }

    /// Tells the poller of `key` to poll; a queue of a lambda not yet
    /// discovered is polled as soon as it is.
    fn tell(&self, key: QueueKey) {
        let served = &self.config.lambdas;
        if !served.is_empty() && !served.contains(&key.lambda) {
            return;
        }
        let buffers = lock(&self.buffers);
        let level = buffers
            .get(&key.lambda)
            .and_then(|levels| levels.get(usize::from(key.priority)));
        match level {
            Some(buffer) => buffer.told.notify_one(),
            // Under the buffers' lock, as discovery takes it: the poller
            // cannot start between the look and the note.
            None => {
                if lock(&self.pending).insert(key) {
                    self.discover.notify_one();
                }
            }
        }
    }

    /// Fills one buffer from its queue whenever told, forever.
    async fn poll(&self, key: QueueKey, room: Arc<Semaphore>, told: Arc<Notify>) {
        loop {
            told.notified().await;
            self.drain(&key, &room).await;
        }
    }

    /// Receives from one queue until an answer is empty, waiting for room
    /// in its buffer before each receive.
    async fn drain(&self, key: &QueueKey, room: &Semaphore) {
        let mut failures = 0u32;
        loop {
            // Wait for room for one message, then take what else is free.
            let Ok(first) = room.acquire().await else {
                return;
            };
            first.forget();
            let extra = room
                .available_permits()
                .min(self.config.receive_batch.saturating_sub(1));
            if extra > 0
                && let Ok(permits) = room.try_acquire_many(extra as u32)
            {
                permits.forget();
            }
            let asked = 1 + extra;
            match self
                .queue
                .queue_receive(key, asked, self.config.receive_wait)
                .await
            {
                Ok(deliveries) => {
                    failures = 0;
                    room.add_permits(asked - deliveries.len());
                    if deliveries.is_empty() {
                        return;
                    }
                    let mut buffers = lock(&self.buffers);
                    if let Some(buffer) = buffers
                        .get_mut(&key.lambda)
                        .and_then(|levels| levels.get_mut(usize::from(key.priority)))
                    {
                        self.held.fetch_add(deliveries.len(), Ordering::Relaxed);
                        buffer.deliveries.extend(deliveries);
                    }
                    drop(buffers);
                    self.arrived.notify_waiters();
                }
                Err(error) => {
                    room.add_permits(asked);
                    failures += 1;
                    tracing::warn!(queue = %key, %error, "cannot receive from the queue");
                    let pause = Duration::from_millis(100 << failures.min(5));
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }

    /// Takes buffered messages for the slots: a lambda's highest priority
    /// first, and the lambdas in turn, one message each per round, starting
    /// from a lambda that moves on with every call. Filled in slot order
    /// instead, a busy lambda could take all the room of a poll and starve
    /// every lambda after it.
    ///
    /// A hand-out holds what one message carries, each task counted at its
    /// lambda's weight; a lambda whose next task does not fit gives no more.
    fn take(&self, slots: &[LambdaSlots], max: usize) -> Vec<(QueueKey, Delivery)> {
        let mut filling = Filling::new(Budget::items(max.min(MAX_NEXT_WORK_TASKS)));
        let mut taken = Vec::new();
        if slots.is_empty() || self.held.load(Ordering::Relaxed) == 0 {
            return taken;
        }
        let mut free: Vec<usize> = slots.iter().map(|slot| slot.free as usize).collect();
        let start = self.turn.fetch_add(1, Ordering::Relaxed) % slots.len();
        // In discovery's order: the buffers, then the weights.
        let mut buffers = lock(&self.buffers);
        let weights = lock(&self.weights);
        loop {
            let before = taken.len();
            for offset in 0..slots.len() {
                if filling.is_full() {
                    return taken;
                }
                let index = (start + offset) % slots.len();
                let slot = &slots[index];
                if free[index] == 0 {
                    continue;
                }
                let Some(levels) = buffers.get_mut(&slot.lambda) else {
                    continue;
                };
                let Some((priority, buffer)) = levels
                    .iter_mut()
                    .enumerate()
                    .rev()
                    .find(|(_, buffer)| !buffer.deliveries.is_empty())
                else {
                    continue;
                };
                let unknown = || weight(LambdaConfig::MAX_PAYLOAD);
                let weight = weights.get(&slot.lambda).copied().unwrap_or_else(unknown);
                if !filling.admit(weight) {
                    free[index] = 0;
                    continue;
                }
                let Some(delivery) = buffer.deliveries.pop() else {
                    continue;
                };
                self.held.fetch_sub(1, Ordering::Relaxed);
                buffer.room.add_permits(1);
                free[index] -= 1;
                taken.push((QueueKey::new(&slot.lambda, priority as u8), delivery));
            }
            if taken.len() == before {
                return taken;
            }
        }
    }

    /// Claims taken messages at the HSC; acknowledges every message that
    /// got an answer.
    async fn claim(&self, taken: Vec<(QueueKey, Delivery)>) -> ServiceResult<Vec<ClaimedTask>> {
        let claims = taken
            .iter()
            .map(|(_, d)| (d.message.task_id.clone(), d.message.enqueue_token))
            .collect();
        let spans: Vec<tracing::Span> = taken
            .iter()
            .map(|(key, d)| match message_trace(d) {
                Some(trace) => spans::claim(&d.message.task_id, &key.lambda, Some(&trace)),
                // An untraced enqueue: the execution continues from what
                // the store kept, if anything.
                None => tracing::Span::none(),
            })
            .collect();
        let answers = match self.hsc.task_claim_many(claims).await {
            Ok(answers) => answers,
            Err(error) => {
                spans.iter().for_each(spans::failed);
                return Err(error);
            }
        };
        if answers.len() != taken.len() {
            return Err(ServiceError::Internal(format!(
                "the HSC answered {} claims with {} answers",
                taken.len(),
                answers.len()
            )));
        }
        let mut acks: BTreeMap<QueueKey, Vec<String>> = BTreeMap::new();
        let mut claimed = Vec::with_capacity(answers.len());
        for (((key, delivery), answer), span) in taken.into_iter().zip(answers).zip(spans) {
            match answer {
                Ok(mut task) => {
                    span.record("waft.task.attempt", task.attempt);
                    // The execution is the claim's child when traced.
                    if let Some(trace) = waft_telemetry::context_of(&span) {
                        task.trace = Some(trace);
                    }
                    claimed.push(task);
                }
                Err(refusal) => {
                    span.record("waft.claim.refused", format!("{refusal:?}"));
                    log_refusal(&delivery, &refusal);
                }
            }
            acks.entry(key).or_default().push(delivery.receipt);
        }
        let queue = self.queue.clone();
        tokio::spawn(async move {
            for (key, receipts) in acks {
                if let Err(error) = queue.queue_ack_many(&key, receipts).await {
                    tracing::warn!(queue = %key, %error, "cannot acknowledge messages; their claims will be refused when they come back");
                }
            }
        });
        Ok(claimed)
    }
}

/// The most a claimed task of a lambda with `max_payload` weighs in a
/// batch: its payload, the longest names, and the rest.
fn weight(max_payload: ByteSize) -> usize {
    // A task id, a lambda name and a collection name.
    const NAMES: usize = 26 + 2 * 63;
    max_payload.as_usize() + NAMES + ITEM_OVERHEAD
}

/// The trace context a queue message carries; a malformed one is dropped
/// (the claim's span then starts from none, and the execution from the
/// context the store kept).
fn message_trace(delivery: &Delivery) -> Option<TraceContext> {
    let message = &delivery.message;
    TraceContext::parse(
        message.traceparent.as_deref()?,
        message.tracestate.as_deref(),
    )
    .ok()
}

fn log_refusal(delivery: &Delivery, refusal: &Refusal) {
    tracing::debug!(task = %delivery.message.task_id, ?refusal, "claim refused; message dropped");
}

#[async_trait]
impl ControllerApi for Controller {
    async fn next_work(&self, request: NextWork) -> ServiceResult<Vec<ClaimedTask>> {
        let inner = &self.inner;
        let served = &inner.config.lambdas;
        let unknown: HashSet<&str> = {
            let buffers = lock(&inner.buffers);
            request
                .slots
                .iter()
                .map(|slot| slot.lambda.as_str())
                .filter(|lambda| !buffers.contains_key(*lambda))
                .collect()
        };
        if let Some(lambda) = unknown
            .iter()
            .find(|l| !served.is_empty() && !served.iter().any(|s| s == *l))
        {
            return Err(ServiceError::FailedPrecondition(format!(
                "this controller does not serve lambda {lambda:?}"
            )));
        }
        if !unknown.is_empty() {
            inner.discover.notify_one();
        }
        let deadline = Instant::now() + request.wait.min(MAX_NEXT_WORK_WAIT);
        loop {
            let arrived = inner.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            let taken = inner.take(&request.slots, request.max_tasks as usize);
            if !taken.is_empty() {
                let claimed = inner.claim(taken).await?;
                if !claimed.is_empty() {
                    return Ok(claimed);
                }
                continue;
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return Ok(Vec::new());
            }
        }
    }
}
