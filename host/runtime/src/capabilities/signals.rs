//! `waft:lambda/signals`: a lambda waits for a signal a client sends its
//! task (an approval, another system's answer).
//!
//! A wait is two journal entries. The first holds when the wait is over by
//! the wall clock: the same in every attempt, however late a resumed one
//! runs. The second holds what the wait returned: the signal's payload, or
//! nothing when the time was up. Between the two, a live execution asks the
//! platform's [`TaskHost`](crate::TaskHost) for the signal: the one of that
//! name after those the task took, counted over the journal (replayed
//! waits included), so a signal sent before the wait is found, and two
//! sent are taken by two waits. When it has not come, the wait is longer
//! than the sandbox's `suspend_after` and no outside call is in flight, the
//! execution is suspended there, its journal ending with the first entry:
//! the task resumes when the signal is sent or the time is up, replays the
//! first entry and asks again. A shorter wait, or one that cannot be
//! suspended, asks again every [`ASK_EVERY`] in the instance.
//!
//! The answer needs no durability point of its own: a signal is kept with
//! its task, so asking again gets the same one; and a call that reaches
//! outside after the wait writes the journal, the wait's answer included,
//! before it goes out.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use waft_core::limits::check_signal_name;
use waft_core::model::Wait;

use crate::contract::current::wit::signals;
use crate::durable::{digest, rfc3339, unix_millis};
use crate::run::HostState;

const WAIT: &str = "waft:lambda/signals.wait";
const TAKE: &str = "waft:lambda/signals.take";

/// How often a wait that is not suspended asks for its signal.
const ASK_EVERY: Duration = Duration::from_millis(200);

/// The longest wait: a hundred years (a lambda asking for `u64::MAX`
/// milliseconds waits this long).
const LONGEST_MS: u64 = 100 * 366 * 24 * 3600 * 1000;

/// The signals of each name the task's executions took so far.
pub(crate) type Taken = HashMap<String, u32>;

impl signals::Host for HostState {
    async fn wait(&mut self, name: String, timeout_ms: u64) -> wasmtime::Result<Option<Vec<u8>>> {
        self.ensure_running()?;
        if let Err(why) = check_signal_name(&name) {
            // A wait no signal could ever answer: the lambda's bug, told.
            return Err(wasmtime::Error::msg(format!("wait_signal: {why}")));
        }
        let timeout = i64::try_from(timeout_ms.min(LONGEST_MS)).unwrap_or(i64::MAX);
        let (until_ms, _) = self.journal.answer(
            WAIT,
            &digest(WAIT, &(&name, timeout_ms)),
            false,
            || unix_millis(SystemTime::now()).saturating_add(timeout),
            |until| format!("wait for signal {name:?} until {}", rfc3339(*until)),
        )?;
        let taken = self.taken.get(&name).copied().unwrap_or(0);
        let digest = digest(TAKE, &(&name, taken));
        let summary = |payload: &Option<Vec<u8>>| match payload {
            Some(payload) => format!("signal {name:?} → {} bytes", payload.len()),
            None => format!("signal {name:?} → none by {}", rfc3339(until_ms)),
        };
        let payload = if self.journal.live_next() {
            let live = self.signal_or_suspend(&name, taken, until_ms).await?;
            self.journal
                .answer(TAKE, &digest, false, || live, summary)?
                .0
        } else {
            // Answered from the journal: `live` is not called.
            self.journal
                .answer(TAKE, &digest, false, || None, summary)?
                .0
        };
        if payload.is_some() {
            *self.taken.entry(name).or_default() += 1;
        }
        Ok(payload)
    }
}

impl HostState {
    /// The signal of `name` after the `taken` ones, live: asked for until
    /// it comes or `until_ms` passes (`None`); the execution is suspended
    /// instead of waiting when it may be.
    async fn signal_or_suspend(
        &mut self,
        name: &str,
        taken: u32,
        until_ms: i64,
    ) -> wasmtime::Result<Option<Vec<u8>>> {
        loop {
            self.ensure_running()?;
            let host = self.host.clone();
            match host.signal(name, taken).await {
                Ok(Some(payload)) => return Ok(Some(payload)),
                Ok(None) => {}
                Err(unread) => return Err(super::stopped(unread, "wait_signal", "signals")),
            }
            let left = until_ms.saturating_sub(unix_millis(SystemTime::now()));
            let Ok(left) = u64::try_from(left) else {
                return Ok(None);
            };
            if left == 0 {
                return Ok(None);
            }
            let left = Duration::from_millis(left);
            if self.waits.would_suspend(left) && self.journal.quiet() {
                let wait = Wait::Signal {
                    name: name.to_owned(),
                    taken,
                };
                return Err(self.suspend(until_ms, wait));
            }
            self.pause(left.min(ASK_EVERY)).await;
        }
    }
}
