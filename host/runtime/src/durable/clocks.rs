//! `wasi:clocks`, journaled: what a lambda reads of the wall and monotonic
//! clocks, and when its waits end.
//!
//! A replayed wait never waits: its pollable is ready at once (the time the
//! lambda reads around it is replayed too). Reads of a clock that follow
//! each other share one entry (a loop polling the clock). The monotonic clock a live
//! execution reads goes on from the last value it replayed, so that time
//! never runs backwards for the lambda across the switch to live.

use std::time::{Duration, Instant};

use wasmtime::component::Resource;
use wasmtime_wasi::p2::bindings::clocks::{monotonic_clock, wall_clock};
use wasmtime_wasi::p2::{DynPollable, Pollable, subscribe};

use super::answer::digest;
use crate::run::HostState;

const WALL_NOW: &str = "wasi:clocks/wall-clock.now";
const WALL_RESOLUTION: &str = "wasi:clocks/wall-clock.resolution";
const MONOTONIC_NOW: &str = "wasi:clocks/monotonic-clock.now";
const MONOTONIC_RESOLUTION: &str = "wasi:clocks/monotonic-clock.resolution";
const WAIT_FOR: &str = "wasi:clocks/monotonic-clock.subscribe-duration";
const WAIT_UNTIL: &str = "wasi:clocks/monotonic-clock.subscribe-instant";

/// The monotonic clock one execution reads: nanoseconds since it started,
/// moved on past every value it replayed.
pub(crate) struct MonotonicClock {
    started: Instant,
    /// Added to the time elapsed: how far replayed values ran ahead.
    ahead: u64,
    /// The last value read, live or replayed.
    last: u64,
}

impl MonotonicClock {
    pub(crate) fn new() -> Self {
        Self {
            started: Instant::now(),
            ahead: 0,
            last: 0,
        }
    }

    /// Now, live: never before a value already read.
    fn now(&mut self) -> u64 {
        let elapsed = u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last = self.last.max(elapsed.saturating_add(self.ahead));
        self.last
    }

    /// A value the journal answered: live time goes on from it.
    fn replayed(&mut self, value: u64) {
        if value > self.last {
            let elapsed = u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX);
            self.ahead = self.ahead.max(value.saturating_sub(elapsed));
            self.last = value;
        }
    }
}

impl wall_clock::Host for HostState {
    fn now(&mut self) -> wasmtime::Result<wall_clock::Datetime> {
        self.ensure_running()?;
        let (seconds, nanoseconds) = self
            .journal
            .answer(
                WALL_NOW,
                &digest(WALL_NOW, &()),
                true,
                wall_now,
                |&(s, n)| format!("now → {s}.{n:09}s since the epoch"),
            )?
            .0;
        Ok(wall_clock::Datetime {
            seconds,
            nanoseconds,
        })
    }

    fn resolution(&mut self) -> wasmtime::Result<wall_clock::Datetime> {
        self.ensure_running()?;
        let (seconds, nanoseconds) = self.journaled(
            WALL_RESOLUTION,
            &(),
            || (0, 1_000),
            |&(s, n)| format!("resolution → {:?}", Duration::new(s, n)),
        )?;
        Ok(wall_clock::Datetime {
            seconds,
            nanoseconds,
        })
    }
}

fn wall_now() -> (u64, u32) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (now.as_secs(), now.subsec_nanos())
}

impl monotonic_clock::Host for HostState {
    fn now(&mut self) -> wasmtime::Result<u64> {
        self.ensure_running()?;
        let clock = &mut self.monotonic;
        let (value, replayed) = self.journal.answer(
            MONOTONIC_NOW,
            &digest(MONOTONIC_NOW, &()),
            true,
            || clock.now(),
            |value| format!("now → {:?}", Duration::from_nanos(*value)),
        )?;
        if replayed {
            self.monotonic.replayed(value);
        }
        Ok(value)
    }

    fn resolution(&mut self) -> wasmtime::Result<u64> {
        self.ensure_running()?;
        self.journaled(
            MONOTONIC_RESOLUTION,
            &(),
            || 1,
            |value| format!("resolution → {value}ns"),
        )
    }

    fn subscribe_instant(&mut self, when: u64) -> wasmtime::Result<Resource<DynPollable>> {
        self.ensure_running()?;
        let now = self.monotonic.now();
        let wait = Duration::from_nanos(when.saturating_sub(now));
        self.wait(WAIT_UNTIL, when, wait)
    }

    fn subscribe_duration(&mut self, duration: u64) -> wasmtime::Result<Resource<DynPollable>> {
        self.ensure_running()?;
        self.wait(WAIT_FOR, duration, Duration::from_nanos(duration))
    }
}

impl HostState {
    /// A wait of `wait`, journaled as `call` with `argument`: over at once
    /// when replayed.
    fn wait(
        &mut self,
        call: &'static str,
        argument: u64,
        wait: Duration,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        let (_, replayed) = self.journal.answer(
            call,
            &digest(call, &argument),
            false,
            || (),
            |()| format!("wait {wait:?}"),
        )?;
        let deadline = if replayed || wait.is_zero() {
            Deadline::Past { yielded: false }
        } else {
            match tokio::time::Instant::now().checked_add(wait) {
                Some(at) => Deadline::At(at),
                None => Deadline::Never,
            }
        };
        let resource = self.table.push(deadline)?;
        subscribe(&mut self.table, resource)
    }
}

/// When a wait is over.
enum Deadline {
    Past { yielded: bool },
    At(tokio::time::Instant),
    Never,
}

#[wasmtime_wasi::async_trait]
impl Pollable for Deadline {
    async fn ready(&mut self) {
        match self {
            Deadline::Past { yielded: true } => {}
            Deadline::Past { yielded } => {
                // Yield once, so that a guest polling in a loop with a zero
                // timeout lets the runtime's other work through.
                *yielded = true;
                tokio::task::yield_now().await;
            }
            Deadline::At(at) => tokio::time::sleep_until(*at).await,
            Deadline::Never => std::future::pending().await,
        }
    }
}
