//! `waft:lambda/children.wait-all`: a fan-in. A lambda waits for children
//! it scheduled to end, and learns how each ended.
//!
//! A wait is one journal entry: the children's ends, once every one has
//! ended. Until then a live execution asks the platform's
//! [`TaskHost`](crate::TaskHost) how they stand, at once and then ever less
//! often (to [`ASK_EVERY`]) while the wait is shorter than the sandbox's
//! `suspend_after`; past it, with no outside call in flight, the execution
//! is suspended there (`Wait::Children`): the end of the last child wakes
//! the task, which replays its journal up to the wait and asks again, now
//! answered. A replay returns the journaled ends without asking: a child
//! redriven since its parent learned it died does not change what the
//! parent was told.
//!
//! The answer needs no durability point of its own: the children's ends
//! are kept in the store, so asking again gets the same ones.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use waft_core::TaskStatus;
use waft_core::limits::MAX_AWAITED;
use waft_core::model::{ChildEnd, ChildrenState, Wait};

use crate::contract::current::wit::children;
use crate::durable::{digest, unix_millis};
use crate::run::HostState;

const WAIT_ALL: &str = "waft:lambda/children.wait-all";

/// The longest pause between two looks at the children in the instance.
const ASK_EVERY: Duration = Duration::from_millis(200);

/// The first pause: children that end quickly are seen quickly.
const FIRST_PAUSE: Duration = Duration::from_millis(10);

/// A suspended fan-in's due time, a century away: the end of its last
/// child wakes it.
const CENTURY_MS: i64 = 100 * 366 * 24 * 3600 * 1000;

/// A child's end as the journal keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct End {
    id: String,
    status: Status,
    output: Option<Vec<u8>>,
    error: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum Status {
    Success,
    FatalFailure,
    Dead,
    Dropped,
    Cancelled,
}

impl HostState {
    /// Every child of `ids`'s end, once each has ended.
    pub(super) async fn wait_all(
        &mut self,
        ids: Vec<String>,
    ) -> wasmtime::Result<Vec<children::ChildEnd>> {
        self.ensure_running()?;
        if ids.len() > MAX_AWAITED {
            return Err(wasmtime::Error::msg(format!(
                "children::wait_all: {} children, more than the {MAX_AWAITED} one wait may list",
                ids.len()
            )));
        }
        let digest = digest(WAIT_ALL, &ids);
        let summary = |ends: &Vec<End>| {
            let failed = ends.iter().filter(|e| e.status != Status::Success).count();
            format!("wait for {} children → {failed} not succeeded", ends.len())
        };
        let ends = if self.journal.live_next() {
            let live = self.ends_or_suspend(&ids).await?;
            self.journal
                .answer(WAIT_ALL, &digest, false, || live, summary)?
                .0
        } else {
            // Answered from the journal: `live` is not called.
            self.journal
                .answer(WAIT_ALL, &digest, false, Vec::new, summary)?
                .0
        };
        Ok(ends.into_iter().map(End::into_wit).collect())
    }

    /// The children's ends, live: asked for until each has ended; the
    /// execution is suspended instead of waiting when it may be.
    async fn ends_or_suspend(&mut self, ids: &[String]) -> wasmtime::Result<Vec<End>> {
        let started = tokio::time::Instant::now();
        let mut pause = FIRST_PAUSE;
        loop {
            self.ensure_running()?;
            let host = self.host.clone();
            match host.children(ids).await {
                Ok(ChildrenState::Ended(ends)) => {
                    return ends.into_iter().map(End::new).collect();
                }
                Ok(ChildrenState::Waiting { .. }) => {}
                Err(unread) => {
                    return Err(super::stopped(
                        unread,
                        "children::wait_all",
                        "children's ends",
                    ));
                }
            }
            if self.waits.waited_enough(started.elapsed()) && self.journal.quiet() {
                let until = unix_millis(std::time::SystemTime::now()).saturating_add(CENTURY_MS);
                let wait = Wait::Children { ids: ids.to_vec() };
                return Err(self.suspend(until, wait));
            }
            self.pause(pause).await;
            pause = (pause * 2).min(ASK_EVERY);
        }
    }
}

impl End {
    fn new(end: ChildEnd) -> wasmtime::Result<Self> {
        let status = match end.status {
            TaskStatus::Success => Status::Success,
            TaskStatus::FatalFailure => Status::FatalFailure,
            TaskStatus::Dead => Status::Dead,
            TaskStatus::Dropped => Status::Dropped,
            TaskStatus::Cancelled => Status::Cancelled,
            live => {
                return Err(wasmtime::Error::msg(format!(
                    "child {} said ended while {live}",
                    end.id
                )));
            }
        };
        Ok(Self {
            id: end.id,
            status,
            output: end.output,
            error: end.error,
        })
    }

    fn into_wit(self) -> children::ChildEnd {
        children::ChildEnd {
            id: self.id,
            status: match self.status {
                Status::Success => children::ChildStatus::Success,
                Status::FatalFailure => children::ChildStatus::FatalFailure,
                Status::Dead => children::ChildStatus::Dead,
                Status::Dropped => children::ChildStatus::Dropped,
                Status::Cancelled => children::ChildStatus::Cancelled,
            },
            output: self.output,
            error: self.error,
        }
    }
}
