//! The chaos driver's faults: which it deals, in shuffled decks, and how
//! it injects each (kills and restarts, queue messages dropped and
//! duplicated, the executors' HSC link slowed and cut, Postgres crashed,
//! and the operator's acts).

use std::collections::BTreeMap;
use std::time::Duration;

use waft_queue::{QueueKey, SqsQueue, TaskQueue};

use crate::operator::{Act, Operator};
use crate::support::Cluster;
use crate::support::proxy::Link;

/// The roles the driver kills, each in its turn.
pub(crate) const PROCESSES: &[&str] = &[
    "executor1",
    "executor2",
    "controller",
    "consumer",
    "consumer2",
    "hsc",
    "frontend",
];

/// One fault the driver injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Fault {
    /// SIGKILL a process, restart it after up to a second.
    Kill(&'static str),
    /// Take messages off the queue and delete them.
    DropMessages,
    /// Take messages off the queue and put each back twice.
    DuplicateMessages,
    /// Hold the executors' HSC traffic 50–250 ms per chunk for two seconds.
    SlowHsc,
    /// Cut the executors off from the HSC for 0.5–3 s (beyond three
    /// heartbeats, so running instances stop themselves).
    CutHsc,
    /// Crash Postgres (immediate shutdown); it comes back within a second.
    CrashPostgres,
    /// Not a fault: an operator's act.
    Operate(Act),
}

impl Fault {
    /// Every fault once: one round of the driver.
    pub(crate) fn deck() -> Vec<Fault> {
        let mut deck: Vec<Fault> = PROCESSES.iter().copied().map(Fault::Kill).collect();
        deck.extend([
            Fault::DropMessages,
            Fault::DuplicateMessages,
            Fault::SlowHsc,
            Fault::CutHsc,
            Fault::CrashPostgres,
        ]);
        deck.extend(Act::ALL.map(Fault::Operate));
        deck
    }

    pub(crate) fn kind(self) -> String {
        match self {
            Fault::Kill(process) => format!("kill {process}"),
            Fault::DropMessages => "drop queue messages".into(),
            Fault::DuplicateMessages => "duplicate queue messages".into(),
            Fault::SlowHsc => "slow HSC link".into(),
            Fault::CutHsc => "cut HSC link".into(),
            Fault::CrashPostgres => "crash Postgres".into(),
            Fault::Operate(act) => act.kind().into(),
        }
    }
}

/// The chaos driver: injects faults one after another and counts them.
pub(crate) struct Chaos {
    pub(crate) rng: fastrand::Rng,
    pub(crate) deck: Vec<Fault>,
    pub(crate) queue: SqsQueue,
    pub(crate) key: QueueKey,
    pub(crate) injected: BTreeMap<String, usize>,
    pub(crate) messages_dropped: usize,
    pub(crate) messages_duplicated: usize,
    pub(crate) operator: Operator,
}

impl Chaos {
    pub(crate) async fn inject_next(&mut self, cluster: &mut Cluster) {
        if self.deck.is_empty() {
            self.deck = Fault::deck();
            self.rng.shuffle(&mut self.deck);
        }
        let fault = self.deck.pop().expect("a full deck");
        match fault {
            Fault::Kill(name) => {
                cluster.process(name).kill();
                tokio::time::sleep(Duration::from_millis(self.rng.u64(0..1_000))).await;
                cluster.process(name).restart();
            }
            Fault::DropMessages => {
                let taken = self.take().await;
                self.messages_dropped += taken.len();
            }
            Fault::DuplicateMessages => {
                let taken = self.take().await;
                let copies: Vec<_> = taken.iter().flat_map(|m| [m.clone(), m.clone()]).collect();
                // Retried until the queue takes them: losing them here
                // would be a drop, not a duplicate.
                while self
                    .queue
                    .queue_send_many(&self.key, copies.clone())
                    .await
                    .is_err()
                {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                self.messages_duplicated += taken.len();
            }
            Fault::SlowHsc => {
                let link = cluster.hsc_link.as_ref().expect("an HSC link");
                link.set(Link::Slow(Duration::from_millis(self.rng.u64(50..250))));
                tokio::time::sleep(Duration::from_secs(2)).await;
                link.set(Link::Up);
            }
            Fault::CutHsc => {
                let link = cluster.hsc_link.as_ref().expect("an HSC link");
                link.set(Link::Cut);
                tokio::time::sleep(Duration::from_millis(self.rng.u64(500..3_000))).await;
                link.set(Link::Up);
            }
            Fault::CrashPostgres => {
                let postgres = waft_testing::postgres().expect("the test cluster");
                postgres.crash().expect("Postgres crashes on demand");
                postgres.wait_ready().await;
            }
            Fault::Operate(act) => self.operator.act(act).await,
        }
        *self.injected.entry(fault.kind()).or_default() += 1;
    }

    /// Receives what the queue has (up to 10 messages) and deletes it.
    async fn take(&self) -> Vec<waft_queue::QueueMessage> {
        let Ok(deliveries) = self
            .queue
            .queue_receive(&self.key, 10, Duration::from_millis(500))
            .await
        else {
            return Vec::new();
        };
        let receipts = deliveries.iter().map(|d| d.receipt.clone()).collect();
        let _ = self.queue.queue_ack_many(&self.key, receipts).await;
        deliveries.into_iter().map(|d| d.message).collect()
    }

    pub(crate) fn kills(&self) -> usize {
        self.injected
            .iter()
            .filter(|(kind, _)| kind.starts_with("kill"))
            .map(|(_, n)| n)
            .sum()
    }
}
