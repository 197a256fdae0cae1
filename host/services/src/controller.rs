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
//!
//! Here: the settings, the buffers and the discovery of lambdas that makes
//! and drops them. Beside it: the pollers that fill the buffers
//! (`polling.rs`), and the hand-out that empties them (`hand_out.rs`).

mod hand_out;
mod polling;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, Semaphore};
use tokio::task::{AbortHandle, JoinSet};
use waft_queue::{Delivery, QueueKey, TaskQueue, Turns};

use self::hand_out::weight;
use crate::{FrontendApi, HscApi, ServiceResult, lock};

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
