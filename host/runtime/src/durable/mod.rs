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
//! The rules (README, "Durable lambdas"):
//!
//! - A call is matched by its position, its name and a digest of its
//!   arguments. A call that does not match is *divergence*: the execution
//!   stops before anything live runs after it ([`Journal::diverged`]).
//! - Before the answer of a call that reached outside the sandbox (an HTTP
//!   response, a child's id) is handed to the lambda, the journal up to it
//!   is written to the store under the execution's lease
//!   ([`Journal::commit`]): a durability point. Other entries wait for the
//!   next one, or for the execution's result.
//! - An outside call in flight when a write happens is written as a *hole*
//!   (an entry with no digest): it never answered, so a replay runs it live
//!   again, at its place.
//! - A lambda that answers `retriable` or `fatal` asked for its last live
//!   outside call to be made again: the journal it leaves ends before it
//!   ([`Journal::finish`]).
//!
//! [`Journal`] is the shared state of one execution's journal; `answer`
//! encodes answers and digests arguments; `clocks` and `random` answer
//! `wasi:clocks` and `wasi:random`. The other journaled calls live with
//! their capabilities and call into [`Journal::call`].

mod answer;
mod clocks;
mod random;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde::de::DeserializeOwned;
use waft_core::limits::{MAX_JOURNAL_BYTES, MAX_JOURNAL_ENTRIES};
use waft_core::model::{JournalEntry, JournalWrite};

use self::answer::decode;
pub(crate) use self::answer::{Digest, digest, encode};
pub(crate) use self::clocks::MonotonicClock;
use crate::redact::Redactor;
use crate::{LeaseLost, TaskHost};

/// Why a journaled call cannot go on: the execution stops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Halt {
    /// "diverged at entry N: …".
    Diverged(String),
    /// The journal would outgrow its bounds.
    Full(String),
}

impl std::error::Error for Halt {}

impl std::fmt::Display for Halt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Halt::Diverged(message) | Halt::Full(message) => f.write_str(message),
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

/// A live call's place in the journal.
#[derive(Debug)]
pub(crate) struct Ticket {
    seq: u32,
    call: &'static str,
    started: Instant,
}

/// A call whose arguments are not all known yet (an HTTP request whose
/// body is still being written): its place is taken now, its match
/// decided by [`Reserved::resolve`].
pub(crate) struct Reserved {
    journal: Journal,
    seq: u32,
    call: &'static str,
    started: Instant,
    /// The entry at its place, when the journal has one.
    expected: Option<JournalEntry>,
}

/// One execution's journal. Cheap to clone; clones share it.
#[derive(Clone)]
pub(crate) struct Journal {
    inner: Arc<Inner>,
}

struct Inner {
    host: Arc<dyn TaskHost>,
    attempt: u32,
    redactor: Arc<Redactor>,
    state: Mutex<State>,
    /// One write to the store at a time, in order.
    writing: tokio::sync::Mutex<()>,
    /// Whether calls are still answered from the journal (the log marks
    /// what the lambda logs meanwhile).
    replaying: Arc<AtomicBool>,
}

/// An entry not yet in the store as it should be.
enum Slot {
    Done(JournalEntry),
    /// A live outside call not yet answered.
    InFlight(&'static str),
}

struct State {
    /// The journal the execution started from.
    recorded: Vec<JournalEntry>,
    /// The place of the next call.
    next: u32,
    /// The store holds what this execution wants below this place.
    written: u32,
    /// Entries at or above `written` that differ from `recorded`.
    unwritten: BTreeMap<u32, Slot>,
    /// Calls answered from the journal.
    replayed: u32,
    /// Bytes of the entries, recorded ones included.
    bytes: usize,
    /// The first call this execution made live.
    first_live: Option<u32>,
    /// The last outside call this execution made live.
    last_live_outside: Option<u32>,
    halt: Option<Halt>,
}

impl Journal {
    /// The journal of an execution of attempt `attempt` that starts from
    /// `recorded` (its task's journal in the store).
    pub(crate) fn new(
        host: Arc<dyn TaskHost>,
        attempt: u32,
        recorded: Vec<JournalEntry>,
        redactor: Arc<Redactor>,
    ) -> Self {
        let len = u32::try_from(recorded.len()).unwrap_or(u32::MAX);
        let bytes = recorded.iter().map(JournalEntry::wire_size).sum();
        Self {
            inner: Arc::new(Inner {
                host,
                attempt,
                redactor,
                replaying: Arc::new(AtomicBool::new(len > 0)),
                writing: tokio::sync::Mutex::new(()),
                state: Mutex::new(State {
                    recorded,
                    next: 0,
                    written: len,
                    unwritten: BTreeMap::new(),
                    replayed: 0,
                    bytes,
                    first_live: None,
                    last_live_outside: None,
                    halt: None,
                }),
            }),
        }
    }

    /// A journal that discards the store's: every call runs live, and the
    /// first write replaces the task's journal from its start.
    pub(crate) fn discarding(&self) -> Self {
        let fresh = Self::new(
            self.inner.host.clone(),
            self.inner.attempt,
            Vec::new(),
            self.inner.redactor.clone(),
        );
        fresh.lock().written = 0;
        fresh
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The secrets kept out of the journal's summaries, and the log.
    pub(crate) fn redactor(&self) -> Arc<Redactor> {
        self.inner.redactor.clone()
    }

    /// Whether calls are still answered from the journal, for the log.
    pub(crate) fn replaying_flag(&self) -> Arc<AtomicBool> {
        self.inner.replaying.clone()
    }

    /// What stopped the execution, if the journal did.
    pub(crate) fn halt(&self) -> Option<Halt> {
        self.lock().halt.clone()
    }

    /// Calls answered from the journal so far.
    pub(crate) fn replayed(&self) -> u32 {
        self.lock().replayed
    }

    /// Takes the place of a call named `call` whose arguments digest to
    /// `digest`: answered from the journal, or to be made live.
    pub(crate) fn call(&self, call: &'static str, digest: &Digest) -> Result<Step, Halt> {
        let reserved = self.reserve(call)?;
        reserved.resolve(digest)
    }

    /// Answers a call that reaches nothing outside the sandbox: from the
    /// journal (and `true`), or live by `live` (and `false`), recorded
    /// with `summary` of its answer.
    pub(crate) fn answer<T: Serialize + DeserializeOwned>(
        &self,
        call: &'static str,
        digest: &Digest,
        live: impl FnOnce() -> T,
        summary: impl FnOnce(&T) -> String,
    ) -> Result<(T, bool), Halt> {
        match self.call(call, digest)? {
            Step::Replay { seq, answer } => Ok((self.decode(seq, call, &answer)?, true)),
            Step::Live(ticket) => {
                let answer = live();
                let text = summary(&answer);
                self.record(ticket, digest, encode(&answer), text, false)?;
                Ok((answer, false))
            }
        }
    }

    /// A replayed answer of `call` at `seq`; one that does not read as
    /// such stops the execution, as a divergence.
    pub(crate) fn decode<T: DeserializeOwned>(
        &self,
        seq: u32,
        call: &str,
        answer: &[u8],
    ) -> Result<T, Halt> {
        decode(answer).ok_or_else(|| {
            self.lock().stop(Halt::Diverged(format!(
                "diverged at entry {seq}: its answer does not read as an answer of {call}"
            )))
        })
    }

    /// Takes the place of a call whose arguments are not all known yet.
    pub(crate) fn reserve(&self, call: &'static str) -> Result<Reserved, Halt> {
        let mut state = self.lock();
        if let Some(halt) = &state.halt {
            return Err(halt.clone());
        }
        let seq = state.next;
        if seq >= MAX_JOURNAL_ENTRIES {
            return Err(state.stop(Halt::Full(format!(
                "the journal holds its most entries, {MAX_JOURNAL_ENTRIES}: \
                 the execution made too many host calls"
            ))));
        }
        state.next += 1;
        let expected = match state.recorded.get(seq as usize) {
            Some(entry) if entry.call != call => {
                let message = diverged(seq, entry, call);
                return Err(state.stop(Halt::Diverged(message)));
            }
            // A hole: the call never answered; it runs live at its place.
            Some(entry) if is_hole(entry) => {
                state.written = state.written.min(seq);
                None
            }
            Some(entry) => Some(entry.clone()),
            None => None,
        };
        if expected.is_none() {
            state.unwritten.insert(seq, Slot::InFlight(call));
            state.first_live = state.first_live.or(Some(seq));
        }
        self.inner.replaying.store(
            (state.next as usize) < state.recorded.len(),
            Ordering::Relaxed,
        );
        Ok(Reserved {
            journal: self.clone(),
            seq,
            call,
            started: Instant::now(),
            expected,
        })
    }

    /// Records the answer of a live call: `answer` as the lambda got it
    /// (encoded), `summary` for people (secrets are redacted from it
    /// here), `outside` when the call reached outside the sandbox.
    pub(crate) fn record(
        &self,
        ticket: Ticket,
        digest: &Digest,
        answer: Vec<u8>,
        summary: String,
        outside: bool,
    ) -> Result<(), Halt> {
        let entry = JournalEntry {
            seq: ticket.seq,
            call: ticket.call.to_owned(),
            digest: digest.to_vec(),
            answer,
            summary: self.inner.redactor.text(summary),
            outside,
            attempt: self.inner.attempt,
            at: unix_millis(SystemTime::now()),
            took_us: u64::try_from(ticket.started.elapsed().as_micros()).unwrap_or(u64::MAX),
        };
        let mut state = self.lock();
        state.bytes += entry.wire_size();
        if state.bytes > MAX_JOURNAL_BYTES {
            return Err(state.stop(Halt::Full(format!(
                "the journal would hold more than its most bytes, {} MiB",
                MAX_JOURNAL_BYTES >> 20
            ))));
        }
        if outside {
            state.last_live_outside = state.last_live_outside.max(Some(ticket.seq));
        }
        state.unwritten.insert(ticket.seq, Slot::Done(entry));
        Ok(())
    }

    /// A durability point: writes the journal as far as it goes to the
    /// store, under the execution's lease. `Err` when the lease is gone.
    pub(crate) async fn commit(&self) -> Result<(), LeaseLost> {
        let _one_at_a_time = self.inner.writing.lock().await;
        let (write, holes) = self.lock().pending();
        self.inner.host.journal(write.clone()).await?;
        let mut state = self.lock();
        // The store holds the write now, but for its holes. A hole filled
        // meanwhile moved `written` below the write: it stays there.
        let written = holes.first().copied().unwrap_or_else(|| write.end());
        if state.written >= write.from {
            state.written = written;
        }
        let keep_from = state.written.min(written);
        state.unwritten = state.unwritten.split_off(&keep_from);
        Ok(())
    }

    /// What the task's journal should become beyond what was written, once
    /// the execution ended. Calls still in flight are written as holes.
    ///
    /// `cut` when the lambda answered `retriable` or `fatal`: it gave up,
    /// most likely on the answer of its last live outside call, so the
    /// journal ends before that call, which the next attempt makes again;
    /// or, when it made none live, before its first live call (a lambda
    /// that retries until the clock says so reads the clock anew).
    pub(crate) fn finish(&self, cut: bool) -> JournalWrite {
        let state = self.lock();
        let (mut write, _) = state.pending();
        let cut_at = state.last_live_outside.or(state.first_live);
        if cut && let Some(last) = cut_at {
            if last < write.from {
                write.from = last;
                write.entries.clear();
            } else {
                write.entries.truncate((last - write.from) as usize);
            }
        }
        write
    }
}

impl State {
    fn stop(&mut self, halt: Halt) -> Halt {
        self.halt = Some(halt.clone());
        halt
    }

    /// The write that brings the store's journal to what this execution
    /// knows, and the places written as holes.
    fn pending(&self) -> (JournalWrite, Vec<u32>) {
        let recorded = u32::try_from(self.recorded.len()).unwrap_or(u32::MAX);
        let end = self.next.max(recorded);
        let mut holes = Vec::new();
        let mut entries = Vec::new();
        for seq in self.written..end {
            let entry = match self.unwritten.get(&seq) {
                Some(Slot::Done(entry)) => entry.clone(),
                Some(Slot::InFlight(call)) => {
                    holes.push(seq);
                    hole(seq, call)
                }
                None => match self.recorded.get(seq as usize) {
                    Some(entry) => entry.clone(),
                    // Reserved by a call that ended in a halt.
                    None => break,
                },
            };
            entries.push(entry);
        }
        (
            JournalWrite {
                from: self.written,
                entries,
            },
            holes,
        )
    }
}

impl Reserved {
    /// Decides, now that its arguments digest to `digest`, whether the call
    /// is answered from the journal or made live.
    pub(crate) fn resolve(self, digest: &Digest) -> Result<Step, Halt> {
        let Some(entry) = self.expected else {
            return Ok(Step::Live(Ticket {
                seq: self.seq,
                call: self.call,
                started: self.started,
            }));
        };
        let mut state = self.journal.lock();
        if let Some(halt) = &state.halt {
            return Err(halt.clone());
        }
        if entry.digest != digest.as_slice() {
            let message = format!(
                "diverged at entry {}: the journal has {} ({}), the lambda called {} \
                 with other arguments",
                self.seq, entry.call, entry.summary, self.call
            );
            return Err(state.stop(Halt::Diverged(message)));
        }
        state.replayed += 1;
        Ok(Step::Replay {
            seq: self.seq,
            answer: entry.answer,
        })
    }

    /// Its place in the journal.
    pub(crate) fn seq(&self) -> u32 {
        self.seq
    }
}

/// An outside call that never answered, as written: no digest.
fn hole(seq: u32, call: &str) -> JournalEntry {
    JournalEntry {
        seq,
        call: call.to_owned(),
        digest: Vec::new(),
        answer: Vec::new(),
        summary: "in flight: never answered".to_owned(),
        outside: true,
        attempt: 0,
        at: 0,
        took_us: 0,
    }
}

fn is_hole(entry: &JournalEntry) -> bool {
    entry.digest.is_empty()
}

fn diverged(seq: u32, entry: &JournalEntry, call: &str) -> String {
    format!(
        "diverged at entry {seq}: the journal has {} ({}), the lambda called {call}",
        entry.call, entry.summary
    )
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
        Ok(self.journal.answer(call, &digest, live, summary)?.0)
    }
}

/// Puts the journal's `wasi:clocks` and `wasi:random` in `linker`, over
/// WASI's own (the linker must allow shadowing).
pub(crate) fn add_to_linker(
    linker: &mut wasmtime::component::Linker<crate::run::HostState>,
) -> wasmtime::Result<()> {
    use wasmtime::component::HasSelf;
    use wasmtime_wasi::p2::bindings::{clocks, random};
    type State = crate::run::HostState;
    fn state(state: &mut State) -> &mut State {
        state
    }
    clocks::wall_clock::add_to_linker::<State, HasSelf<State>>(linker, state)?;
    clocks::monotonic_clock::add_to_linker::<State, HasSelf<State>>(linker, state)?;
    random::random::add_to_linker::<State, HasSelf<State>>(linker, state)?;
    random::insecure::add_to_linker::<State, HasSelf<State>>(linker, state)?;
    random::insecure_seed::add_to_linker::<State, HasSelf<State>>(linker, state)?;
    Ok(())
}
