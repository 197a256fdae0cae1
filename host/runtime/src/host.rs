//! What a running lambda can ask of the platform, as a trait the platform
//! implements: heartbeats go to the HSC, child tasks to the Frontend. The
//! runtime itself knows neither.

use std::sync::Mutex;
use std::time::SystemTime;

use waft_core::model::{ChildEnd, ChildrenState, JournalWrite};

/// A child task a lambda asked for (chaining).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildRequest {
    pub lambda: String,
    pub payload: Vec<u8>,
    pub collection: Option<String>,
    pub priority: Option<u8>,
    pub not_before: Option<SystemTime>,
    /// Its key within its lambda (see `waft_core::model::Task::key`).
    pub key: Option<String>,
    /// Its place among the children the task's executions asked for, from
    /// 0, replayed ones included: the same child has the same rank in
    /// every attempt.
    pub rank: u32,
}

/// Why a child task was not scheduled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleRejection {
    /// The request is wrong; retrying will not help.
    #[error("invalid child task: {0}")]
    Invalid(String),
    /// The lambda has no grant to schedule this child (the guest sees it as
    /// `invalid`, and the task's log says what was refused).
    #[error("not allowed: {0}")]
    Denied(String),
    /// The execution no longer holds its lease; nothing was scheduled.
    #[error("lease lost: {0}")]
    LeaseLost(String),
    /// The platform cannot take the request now.
    #[error("scheduling unavailable: {0}")]
    Unavailable(String),
}

/// The execution no longer holds its task's lease.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("lease lost: {reason}")]
pub struct LeaseLost {
    pub reason: String,
}

/// Why what an execution waits for (a signal, its children's ends) could
/// not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unread {
    /// The execution no longer holds its task's lease.
    #[error("lease lost: {0}")]
    LeaseLost(String),
    /// The lambda asked for what it cannot wait for (a task that is not
    /// its child).
    #[error("{0}")]
    Invalid(String),
    /// The platform could not be asked now.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

/// The platform side of a running task's host calls.
///
/// One value per execution: it knows which task and which lease it speaks
/// for. Implementations must not block; they are awaited on the executor's
/// runtime.
#[async_trait::async_trait]
pub trait TaskHost: Send + Sync {
    /// The lambda says it is alive; `Err` when the lease is gone.
    async fn heartbeat(&self, progress: Option<String>) -> Result<(), LeaseLost>;

    /// The lambda asks for a child task; returns its id. The host may
    /// answer before the child is written, if it writes it before
    /// anything of the execution reaches outside (see [`TaskHost::settle`]).
    async fn schedule(&self, child: ChildRequest) -> Result<String, ScheduleRejection>;

    /// Writes what the lambda was answered before it was written (children)
    /// before something of the execution reaches outside: an outbound
    /// request; journal writes, children reads and results do it
    /// themselves. `Err` when that failed, and the execution then stops.
    async fn settle(&self) -> Result<(), LeaseLost> {
        Ok(())
    }

    /// Writes entries to the task's journal before the answer of a call
    /// that reached outside the sandbox is handed to the lambda (a
    /// durability point); `Err` when the lease is gone, and the execution
    /// then stops.
    async fn journal(&self, write: JournalWrite) -> Result<(), LeaseLost>;

    /// The task's journal is discarded (a lambda deployed
    /// `--on-divergence restart` diverged from it) before the execution
    /// starts afresh: a new generation of the journal, whose children are
    /// new ones, not those the discarded journal scheduled. `Err` when the
    /// lease is gone, and the execution then stops.
    async fn discard_journal(&self) -> Result<(), LeaseLost> {
        Ok(())
    }

    /// The signal named `name` that follows the `taken` of that name the
    /// task's executions took already, in the order signals were sent;
    /// `None` while it has not been sent.
    async fn signal(&self, name: &str, taken: u32) -> Result<Option<Vec<u8>>, Unread>;

    /// How the task's children `ids` stand: how many have not ended, or
    /// how each ended once none is live (a fan-in).
    async fn children(&self, ids: &[String]) -> Result<ChildrenState, Unread>;
}

/// A [`TaskHost`] with no platform behind it, for `waft invoke` and tests:
/// heartbeats always succeed, child tasks are recorded, not run, and the
/// signals are those [`RecordingHost::send_signal`] sent. A child it
/// recorded ends as [`RecordingHost::end_child`] says, and is live until.
///
/// It keeps a bounded record whatever the lambda does: of heartbeats, their
/// count and the last progress note (a lambda may heartbeat in a loop); of
/// children, the first [`RecordingHost::MAX_CHILDREN`] and a count.
///
/// ```
/// use waft_runtime::{RecordingHost, TaskHost};
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let host = RecordingHost::default();
/// host.heartbeat(Some("half way".into())).await.unwrap();
/// host.heartbeat(None).await.unwrap();
/// assert_eq!(host.heartbeats(), 2);
/// assert_eq!(host.last_progress().as_deref(), Some("half way"));
/// # });
/// ```
#[derive(Debug, Default)]
pub struct RecordingHost {
    heartbeats: Mutex<Heartbeats>,
    children: Mutex<(Vec<ChildRequest>, u64)>,
    journal: Mutex<Vec<JournalWrite>>,
    signals: Mutex<Vec<(String, Vec<u8>)>>,
    ended: Mutex<Vec<ChildEnd>>,
}

#[derive(Debug, Default)]
struct Heartbeats {
    count: u64,
    last_progress: Option<String>,
}

impl RecordingHost {
    /// Child requests kept; later ones are only counted.
    pub const MAX_CHILDREN: usize = 1000;

    /// Heartbeats so far.
    pub fn heartbeats(&self) -> u64 {
        lock(&self.heartbeats).count
    }

    /// The latest progress note a heartbeat carried.
    pub fn last_progress(&self) -> Option<String> {
        lock(&self.heartbeats).last_progress.clone()
    }

    /// The first child tasks requested, in order (at most
    /// [`RecordingHost::MAX_CHILDREN`]).
    pub fn children(&self) -> Vec<ChildRequest> {
        lock(&self.children).0.clone()
    }

    /// The journal writes of the execution's durability points, in order.
    pub fn journal_writes(&self) -> Vec<JournalWrite> {
        lock(&self.journal).clone()
    }

    /// Child tasks requested, all of them.
    pub fn children_requested(&self) -> u64 {
        lock(&self.children).1
    }

    /// Sends the task a signal, as a client would.
    pub fn send_signal(&self, name: &str, payload: impl Into<Vec<u8>>) {
        lock(&self.signals).push((name.to_owned(), payload.into()));
    }

    /// Ends a child the lambda scheduled (its id is `end.id`), as its own
    /// execution would.
    pub fn end_child(&self, end: ChildEnd) {
        lock(&self.ended).push(end);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[async_trait::async_trait]
impl TaskHost for RecordingHost {
    async fn heartbeat(&self, progress: Option<String>) -> Result<(), LeaseLost> {
        let mut heartbeats = lock(&self.heartbeats);
        heartbeats.count += 1;
        if progress.is_some() {
            heartbeats.last_progress = progress;
        }
        Ok(())
    }

    async fn schedule(&self, child: ChildRequest) -> Result<String, ScheduleRejection> {
        let mut children = lock(&self.children);
        children.1 += 1;
        if children.0.len() < Self::MAX_CHILDREN {
            children.0.push(child);
        }
        Ok(format!("local-child-{}", children.1))
    }

    async fn journal(&self, write: JournalWrite) -> Result<(), LeaseLost> {
        lock(&self.journal).push(write);
        Ok(())
    }

    async fn signal(&self, name: &str, taken: u32) -> Result<Option<Vec<u8>>, Unread> {
        let signals = lock(&self.signals);
        let mut named = signals.iter().filter(|(n, _)| n == name);
        Ok(named
            .nth(taken as usize)
            .map(|(_, payload)| payload.clone()))
    }

    async fn children(&self, ids: &[String]) -> Result<ChildrenState, Unread> {
        let scheduled = lock(&self.children).1;
        let ended = lock(&self.ended);
        let mut ends = Vec::with_capacity(ids.len());
        let mut live = 0;
        for id in ids {
            let child = id
                .strip_prefix("local-child-")
                .and_then(|n| n.parse::<u64>().ok())
                .filter(|n| (1..=scheduled).contains(n));
            if child.is_none() {
                return Err(Unread::Invalid(format!(
                    "task {id:?} is not a child of this task"
                )));
            }
            match ended.iter().rev().find(|end| end.id == *id) {
                Some(end) => ends.push(end.clone()),
                None => live += 1,
            }
        }
        if live > 0 {
            return Ok(ChildrenState::Waiting { live });
        }
        Ok(ChildrenState::Ended(ends))
    }
}
