//! How the Controller's buffers fill: each `<lambda, priority>` has a
//! poller that receives from its queue only when told — by the Store
//! Consumer's fills, which the Frontend reports, or by the sweep of the
//! store's backlog — and then until an answer is empty, waiting for room in
//! its buffer before each receive.
//!
//! Apart from the hand-out (`hand_out.rs`) because the two meet only in the
//! buffers: pollers put messages in, `NextWork` takes them out.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;
use waft_queue::QueueKey;

use super::Inner;
use crate::lock;

impl Inner {
    /// Tells the pollers of the queues the consumer fills, as the Frontend
    /// reports them, and sweeps the backlog every `sweep` interval and
    /// whenever the Frontend says fills may have been missed (at the first
    /// answer, too); forever.
    pub(super) async fn follow_fills(&self) {
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
    pub(super) async fn poll(&self, key: QueueKey, room: Arc<Semaphore>, told: Arc<Notify>) {
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
}
