//! Waits: a lambda blocked on nothing but its own timers is suspended.
//!
//! Every wait a lambda makes on the clock (`subscribe-duration`,
//! `subscribe-instant`: what `std::thread::sleep`, Python's `time.sleep`
//! and JavaScript's `setTimeout` come down to) is journaled with the time
//! it ends by the wall clock (see `clocks`). `wasi:io/poll` is answered
//! here, over WASI's own: when the lambda blocks (`poll`, `pollable.block`)
//! on pollables that are all such waits, the earliest of them further away
//! than the sandbox's `suspend_after`, and no outside call of its is in
//! flight, the execution stops there. Its journal, which ends with the
//! wait, goes to the store with the result, and the task is suspended until
//! the wait is over; then a fresh instance replays the journal, the wait's
//! entry answers that it is over, and the lambda goes on from the poll. No
//! instance, executor slot or lease is held meanwhile.
//!
//! A lambda that also waits on anything else (an HTTP response, a stream)
//! is never suspended: only time can end its wait, or the store could not
//! know when to wake it.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use waft_core::model::Wait;
use wasmtime::component::Resource;
use wasmtime_wasi::p2::DynPollable;
use wasmtime_wasi::p2::bindings::io::poll;

use crate::run::HostState;

/// One execution's timer waits, and whether it was suspended in one.
pub(crate) struct Waits {
    suspend_after: Option<Duration>,
    /// Waits not over when made, by their pollable's handle.
    pending: HashMap<u32, Wake>,
    /// When the wait the execution was suspended in ends (Unix ms), and
    /// what else ends it.
    suspended: Option<(i64, Wait)>,
}

/// When a wait ends: by the wall clock (Unix ms, what the store wakes the
/// task at) and by the runtime's clock (what the instance would sleep to).
#[derive(Debug, Clone, Copy)]
struct Wake {
    at_ms: i64,
    at: tokio::time::Instant,
}

impl Waits {
    pub(crate) fn new(suspend_after: Option<Duration>) -> Self {
        Self {
            suspend_after,
            pending: HashMap::new(),
            suspended: None,
        }
    }

    /// `pollable` is a wait that ends at `at_ms` (Unix ms), `at` by the
    /// runtime's clock.
    pub(crate) fn add(
        &mut self,
        pollable: &Resource<DynPollable>,
        at_ms: i64,
        at: tokio::time::Instant,
    ) {
        self.pending.insert(pollable.rep(), Wake { at_ms, at });
    }

    /// When the wait the execution was suspended in ends, and what else
    /// ends it.
    pub(crate) fn suspended(&self) -> Option<(SystemTime, Wait)> {
        let (at_ms, wait) = self.suspended.clone()?;
        let after = Duration::from_millis(u64::try_from(at_ms).unwrap_or(0));
        Some((UNIX_EPOCH.checked_add(after).unwrap_or(UNIX_EPOCH), wait))
    }

    /// Whether a wait of `left` is long enough to be suspended in.
    pub(crate) fn would_suspend(&self, left: Duration) -> bool {
        self.suspend_after.is_some_and(|after| left > after)
    }

    /// Whether a wait with no end of its own that has lasted `waited` is
    /// to be suspended now.
    pub(crate) fn waited_enough(&self, waited: Duration) -> bool {
        self.suspend_after.is_some_and(|after| waited >= after)
    }

    /// The wait a block on `pollables` would suspend in: the earliest, when
    /// all of them are timer waits and it is further away than
    /// `suspend_after`.
    fn suspends(&self, pollables: &[Resource<DynPollable>]) -> Option<Wake> {
        let after = self.suspend_after?;
        let mut earliest: Option<Wake> = None;
        for pollable in pollables {
            let wake = *self.pending.get(&pollable.rep())?;
            if earliest.is_none_or(|e| wake.at < e.at) {
                earliest = Some(wake);
            }
        }
        let wake = earliest?;
        let left = wake
            .at
            .saturating_duration_since(tokio::time::Instant::now());
        (left > after).then_some(wake)
    }
}

/// The error that stops a suspended execution (the outcome is read from
/// [`Waits::suspended`]).
#[derive(Debug)]
struct Suspend;

impl std::fmt::Display for Suspend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("suspended until its wait is over")
    }
}

impl std::error::Error for Suspend {}

impl HostState {
    /// Stops the execution when blocking on `pollables` should suspend it.
    fn suspend_if_idle(&mut self, pollables: &[Resource<DynPollable>]) -> wasmtime::Result<()> {
        self.ensure_running()?;
        let Some(wake) = self.waits.suspends(pollables) else {
            return Ok(());
        };
        if !self.journal.quiet() {
            // An outside call still in flight would be lost: wait here.
            return Ok(());
        }
        Err(self.suspend(wake.at_ms, Wait::Timer))
    }

    /// Stops the execution to suspend it until `until_ms` (Unix ms), or
    /// until what `wait` names; the caller found the execution quiet.
    pub(crate) fn suspend(&mut self, until_ms: i64, wait: Wait) -> wasmtime::Error {
        self.waits.suspended = Some((until_ms, wait));
        wasmtime::Error::new(Suspend)
    }
}

impl poll::Host for HostState {
    async fn poll(&mut self, pollables: Vec<Resource<DynPollable>>) -> wasmtime::Result<Vec<u32>> {
        self.suspend_if_idle(&pollables)?;
        poll::Host::poll(&mut self.table, pollables).await
    }
}

impl poll::HostPollable for HostState {
    async fn block(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<()> {
        self.suspend_if_idle(std::slice::from_ref(&pollable))?;
        poll::HostPollable::block(&mut self.table, pollable).await
    }

    async fn ready(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<bool> {
        poll::HostPollable::ready(&mut self.table, pollable).await
    }

    fn drop(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<()> {
        self.waits.pending.remove(&pollable.rep());
        poll::HostPollable::drop(&mut self.table, pollable)
    }
}
