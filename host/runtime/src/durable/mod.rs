//! Durable executions: every host call a lambda makes is journaled, and
//! the next attempt of its task is answered from the journal until it runs
//! out, then continues live.
//!
//! Everything a lambda can observe of the world reaches it through a host
//! call — the clocks, randomness, its configuration, outbound HTTP, its
//! children, heartbeats — and WebAssembly is deterministic otherwise (the
//! engine canonicalises NaNs and runs relaxed SIMD deterministically; see
//! `engine`). So a lambda answered the same calls takes the same path, in
//! any language, with no step wrappers: a retry resumes where the last
//! attempt stopped instead of redoing every side effect.
//!
//! The rules (docs/durable.md):
//!
//! - A call is matched by its position, its name and a digest of its
//!   arguments. A call that does not match is *divergence*: the execution
//!   stops, and a call that reaches outside first waits until every call
//!   before it is matched ([`Journal::settled`]), so nothing live goes out
//!   after a mismatch.
//! - Before the answer of a call that reached outside the sandbox (an HTTP
//!   response) is handed to the lambda, the journal up to it is written to
//!   the store under the execution's lease ([`Journal::commit`]): a
//!   durability point. Other entries wait for the next one, or for the
//!   execution's result; so does a child's, whose rank gives a repeated
//!   schedule the same child back (see `capabilities/children.rs`).
//! - An outside call that never answered (in flight when a write happened,
//!   or given up) is written as a *hole* (an entry with no digest): a
//!   replay makes it live again, at its place.
//! - A lambda that answers `retriable` or `fatal` after a failed outside
//!   call has that call made again next time, whatever order concurrent
//!   calls finished in ([`Journal::finish`]).
//!
//! `journal` holds one execution's journal, `writes` its durability
//! points, `runs` the calls that share an entry (clock reads, heartbeats),
//! `cut` what a lambda that gives up leaves of it; `answer` encodes answers
//! and digests arguments; `clocks` and `random` answer `wasi:clocks` and
//! `wasi:random`; `waits` suspends a lambda blocked on its timers alone. The other journaled calls live with their capabilities
//! and call into [`Journal::call`].

mod answer;
mod clocks;
mod cut;
mod journal;
mod random;
mod runs;
mod waits;
mod writes;

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde::de::DeserializeOwned;

pub(crate) use self::answer::{digest, encode};
pub(crate) use self::clocks::{MonotonicClock, rfc3339};
pub(crate) use self::journal::{Journal, Outside, Reserved, Ticket};
pub(crate) use self::waits::Waits;

/// Why a journaled call cannot go on: the execution stops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Halt {
    /// "diverged at entry N: …".
    Diverged(Divergence),
    /// The journal would outgrow its bounds.
    Full(String),
    /// A replay that stops where its journal does ([`Journal::stop_at_end`])
    /// reached call `call` at entry `seq`, which the journal does not answer.
    Ended { seq: u32, call: String },
}

impl std::error::Error for Halt {}

impl std::fmt::Display for Halt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Halt::Diverged(divergence) => divergence.fmt(f),
            Halt::Full(message) => f.write_str(message),
            Halt::Ended { seq, call } => write!(
                f,
                "stopped where the journal ends: entry {seq}, a call of {call}, is not in it"
            ),
        }
    }
}

/// Where a lambda's calls stopped matching its task's journal: the entry,
/// what the journal holds there, and what the lambda called instead. Kept
/// apart from its message so that a deploy's check can group tasks by
/// where they part from the new code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    /// The entry at which the calls part.
    pub seq: u32,
    /// The journal's call at that entry.
    pub recorded: String,
    /// What the journal says of that call (its summary: a request's method
    /// and URL, a signal's name).
    pub summary: String,
    /// The call the lambda made there.
    pub called: String,
    /// How the two differ.
    pub parting: Parting,
}

/// How a lambda's call differs from its journal's entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parting {
    /// Another function than the journal's.
    OtherCall,
    /// The journal's function, with other arguments.
    OtherArguments,
    /// The journal holds more calls of its function at that entry (repeated
    /// clock reads, heartbeats): the lambda made fewer, then another.
    FewerCalls,
    /// The journal's answer does not read as an answer of the call.
    Unreadable,
}

impl std::fmt::Display for Divergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Divergence {
            seq,
            recorded,
            summary,
            called,
            parting,
        } = self;
        match parting {
            Parting::OtherCall => write!(
                f,
                "diverged at entry {seq}: the journal has {recorded} ({summary}), the lambda \
                 called {called}"
            ),
            Parting::OtherArguments => write!(
                f,
                "diverged at entry {seq}: the journal has {recorded} ({summary}), the lambda \
                 called {called} with other arguments"
            ),
            Parting::FewerCalls => write!(
                f,
                "diverged at entry {seq}: the journal has more calls of {recorded} ({summary}), \
                 the lambda called {called}"
            ),
            Parting::Unreadable => write!(
                f,
                "diverged at entry {seq}: its answer does not read as an answer of {called}"
            ),
        }
    }
}

/// What to do with a call.
pub(crate) enum Step {
    /// Answer it with this (encoded) answer, the journal's entry `seq`.
    Replay { seq: u32, answer: Vec<u8> },
    /// Make it live, then [`Journal::record`] the answer under this ticket.
    Live(Ticket),
}

pub(crate) fn unix_millis(at: SystemTime) -> i64 {
    match at.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_millis()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_millis()).unwrap_or(i64::MAX),
    }
}

impl crate::run::HostState {
    /// [`Journal::answer`] for a call whose digest is of `arguments`;
    /// a halt traps the guest.
    pub(crate) fn journaled<T: Serialize + DeserializeOwned>(
        &self,
        call: &'static str,
        arguments: &impl Serialize,
        live: impl FnOnce() -> T,
        summary: impl FnOnce(&T) -> String,
    ) -> wasmtime::Result<T> {
        let digest = digest(call, arguments);
        Ok(self.journal.answer(call, &digest, false, live, summary)?.0)
    }
}

/// Puts the journal's `wasi:clocks` and `wasi:random`, and the `wasi:io/poll`
/// that suspends a lambda waiting on its timers, in `linker`, over WASI's
/// own (the linker must allow shadowing).
pub(crate) fn add_to_linker(
    linker: &mut wasmtime::component::Linker<crate::run::HostState>,
) -> wasmtime::Result<()> {
    use wasmtime::component::HasSelf;
    use wasmtime_wasi::p2::bindings::{clocks, io, random};
    type State = crate::run::HostState;
    fn state(state: &mut State) -> &mut State {
        state
    }
    clocks::wall_clock::add_to_linker::<State, HasSelf<State>>(linker, state)?;
    clocks::monotonic_clock::add_to_linker::<State, HasSelf<State>>(linker, state)?;
    random::random::add_to_linker::<State, HasSelf<State>>(linker, state)?;
    random::insecure::add_to_linker::<State, HasSelf<State>>(linker, state)?;
    random::insecure_seed::add_to_linker::<State, HasSelf<State>>(linker, state)?;
    io::poll::add_to_linker::<State, HasSelf<State>>(linker, state)?;
    Ok(())
}
