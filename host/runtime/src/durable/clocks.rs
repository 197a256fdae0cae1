//! `wasi:clocks`, journaled: what a lambda reads of the wall and monotonic
//! clocks, and when its waits end.
//!
//! A wait is journaled with the time it ends by the wall clock, and with the
//! monotonic time it ends at. A replayed wait whose end has passed is ready
//! at once, and the monotonic clock moves on to its end; one not yet over
//! (a task resumed from a suspension a little early) waits out the rest,
//! or is suspended in again (see `waits`). Reads of a clock that follow
//! each other share one entry (a loop polling the clock). The monotonic clock a live
//! execution reads goes on from the last value it replayed, so that time
//! never runs backwards for the lambda across the switch to live.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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
        self.wait(WAIT_UNTIL, when, wait, when.max(now))
    }

    fn subscribe_duration(&mut self, duration: u64) -> wasmtime::Result<Resource<DynPollable>> {
        self.ensure_running()?;
        let end = self.monotonic.now().saturating_add(duration);
        self.wait(WAIT_FOR, duration, Duration::from_nanos(duration), end)
    }
}

impl HostState {
    /// A wait of `wait` that ends at `end` on the monotonic clock,
    /// journaled as `call` with `argument`, and answered by when it ends by
    /// the wall clock (Unix ms) and `end`.
    fn wait(
        &mut self,
        call: &'static str,
        argument: u64,
        wait: Duration,
        end: u64,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        let ((at_ms, end), replayed) = self.journal.answer(
            call,
            &digest(call, &argument),
            false,
            || {
                (
                    unix_ms(SystemTime::now()).saturating_add(ceil_ms(wait)),
                    end,
                )
            },
            |(at_ms, _)| format!("wait {wait:?}, until {}", rfc3339(*at_ms)),
        )?;
        let left = if replayed {
            self.monotonic.replayed(end);
            let left = at_ms.saturating_sub(unix_ms(SystemTime::now()));
            Duration::from_millis(u64::try_from(left).unwrap_or(0))
        } else {
            wait
        };
        if left.is_zero() {
            let resource = self.table.push(Deadline::Past { yielded: false })?;
            return subscribe(&mut self.table, resource);
        }
        let at = tokio::time::Instant::now().checked_add(left);
        let resource = self.table.push(at.map_or(Deadline::Never, Deadline::At))?;
        let pollable = subscribe(&mut self.table, resource)?;
        let at = at.unwrap_or_else(far_future);
        self.waits.add(&pollable, at_ms, at);
        Ok(pollable)
    }
}

fn unix_ms(at: SystemTime) -> i64 {
    super::unix_millis(at)
}

/// `wait` in whole milliseconds, rounded up: a wait never ends early.
fn ceil_ms(wait: Duration) -> i64 {
    let ms = wait.as_nanos().div_ceil(1_000_000);
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// A time further away than any wait a lambda can be suspended in.
fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600)
}

/// Unix ms as RFC 3339, for summaries.
pub(crate) fn rfc3339(at_ms: i64) -> String {
    use std::fmt::Write as _;
    let after = Duration::from_millis(u64::try_from(at_ms).unwrap_or(0));
    let mut text = String::new();
    // RFC 3339 ends with the year 9999: a later time is written in ms.
    match UNIX_EPOCH.checked_add(after) {
        Some(at) if write!(text, "{}", humantime::format_rfc3339_millis(at)).is_ok() => text,
        _ => format!("{at_ms}ms"),
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

#[cfg(test)]
mod tests {
    #[test]
    fn a_time_past_the_year_9999_reads_in_milliseconds() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::rfc3339(i64::MAX), format!("{}ms", i64::MAX));
    }
}
