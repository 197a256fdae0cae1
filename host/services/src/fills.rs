//! Which queues the Store Consumer filled: how a Controller knows which of
//! its queues to poll, so that its idle cost does not grow with the number
//! of lambdas deployed.
//!
//! After each turn the consumer signals the `<lambda, priority>` it sent
//! messages to ([`FillSignal`]). The Frontend keeps what it hears in
//! [`Fills`]: per queue, the generation of its last fill. Controllers long-
//! poll it ([`crate::api::ClusterApi::queue_filled`]) passing back the
//! generation they were last answered, so a fill between two polls is never
//! missed while the Frontend lives. In one process the consumer tells the
//! Frontend's `Fills` directly; across processes the signal travels as a
//! Postgres notification that every Frontend relays.
//!
//! A signal is best effort. A fill the Frontend never heard, and a message
//! that comes back after its visibility timeout (its Controller died before
//! claiming it), are found by the Controller's sweep of the store's backlog
//! ([`crate::api::ClusterApi::queue_backlog`]); a Frontend that may have
//! missed signals (a new one, one whose relay reconnected) answers `missed`
//! so that its Controllers sweep at once.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use waft_core::model::QueueFills;
use waft_queue::QueueKey;

/// Tells Controllers, through the Frontend, which queues a consumer's turn
/// filled.
#[async_trait]
pub trait FillSignal: Send + Sync {
    /// Messages were sent to these queues. Best effort: a lost signal is
    /// found by the Controllers' sweep.
    async fn filled(&self, queues: &[QueueKey]);
}

/// No Frontend to tell: Controllers find the messages by their sweep.
#[async_trait]
impl FillSignal for () {
    async fn filled(&self, _: &[QueueKey]) {}
}

/// The fills a Frontend heard of, by generation. Cheap to clone.
#[derive(Clone)]
pub struct Fills {
    state: std::sync::Arc<watch::Sender<State>>,
}

struct State {
    /// Generations before this one are not this `Fills`'s: a caller that
    /// passes one may have missed fills.
    first: u64,
    generation: u64,
    /// Per queue, the generation of its last fill.
    filled: HashMap<QueueKey, u64>,
}

impl Default for Fills {
    fn default() -> Self {
        let first = first_generation();
        Self {
            state: std::sync::Arc::new(watch::Sender::new(State {
                first,
                generation: first,
                filled: HashMap::new(),
            })),
        }
    }
}

impl Fills {
    /// Records a fill of `queues` and wakes every caller waiting.
    pub fn note(&self, queues: &[QueueKey]) {
        if queues.is_empty() {
            return;
        }
        self.state.send_modify(|state| {
            state.generation += 1;
            for queue in queues {
                state.filled.insert(queue.clone(), state.generation);
            }
        });
    }

    /// Fills may have been missed (the relay that brings them reconnected):
    /// every caller is answered `missed` once, and sweeps.
    pub fn note_missed(&self) {
        self.state.send_modify(|state| {
            state.generation += 1;
            state.first = state.generation;
            state.filled.clear();
        });
    }

    /// The queues filled after `seen`, waiting at most `wait` for one.
    pub async fn wait(&self, seen: u64, wait: Duration) -> QueueFills {
        let mut receiver = self.state.subscribe();
        let changed = receiver.wait_for(|state| state.generation != seen);
        // A timeout answers what there is: nothing new.
        let _ = tokio::time::timeout(wait, changed).await;
        let state = receiver.borrow();
        if seen < state.first || seen > state.generation {
            return QueueFills {
                generation: state.generation,
                queues: Vec::new(),
                missed: true,
            };
        }
        let mut queues: Vec<(String, u8)> = (state.filled.iter())
            .filter(|(_, generation)| **generation > seen)
            .map(|(key, _)| (key.lambda.clone(), key.priority))
            .collect();
        queues.sort();
        QueueFills {
            generation: state.generation,
            queues,
            missed: false,
        }
    }
}

#[async_trait]
impl FillSignal for Fills {
    async fn filled(&self, queues: &[QueueKey]) {
        self.note(queues);
    }
}

/// A generation no earlier Frontend is likely to have answered, and far
/// from every later one's: a caller that followed another Frontend hears
/// `missed`.
fn first_generation() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |since| since.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_fill_after_the_generation_seen_is_answered_once() {
        let fills = Fills::default();
        let first = fills.wait(0, Duration::ZERO).await;
        assert!(
            first.missed,
            "a first call has seen nothing of this Frontend"
        );
        fills.note(&[QueueKey::new("mail", 0), QueueKey::new("mail", 1)]);
        let filled = fills.wait(first.generation, Duration::ZERO).await;
        assert!(!filled.missed);
        assert_eq!(filled.queues, vec![("mail".into(), 0), ("mail".into(), 1)]);
        let again = fills
            .wait(filled.generation, Duration::from_millis(10))
            .await;
        assert_eq!(again.queues, Vec::<(String, u8)>::new());
        assert_eq!(again.generation, filled.generation);
    }

    #[tokio::test]
    async fn a_waiting_caller_hears_a_fill_at_once() {
        let fills = Fills::default();
        let seen = fills.wait(0, Duration::ZERO).await.generation;
        let waiting = tokio::spawn({
            let fills = fills.clone();
            async move { fills.wait(seen, Duration::from_secs(30)).await }
        });
        tokio::task::yield_now().await;
        fills.note(&[QueueKey::new("mail", 2)]);
        let answer = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("answered at the fill")
            .unwrap();
        assert_eq!(answer.queues, vec![("mail".into(), 2)]);
    }

    #[tokio::test]
    async fn a_missed_relay_makes_every_caller_sweep() {
        let fills = Fills::default();
        let seen = fills.wait(0, Duration::ZERO).await.generation;
        fills.note(&[QueueKey::new("mail", 0)]);
        fills.note_missed();
        let answer = fills.wait(seen, Duration::ZERO).await;
        assert!(answer.missed);
        let next = fills.wait(answer.generation, Duration::ZERO).await;
        assert!(!next.missed, "a caller that heard `missed` follows again");
    }
}
