//! One execution's journal: the places its calls take, what it replays,
//! what it records live, and what the store must be written.
//!
//! The store's journal is rewritten from `written` on at each durability
//! point: below it, the store holds what this execution wants. A place
//! whose answer is still to come (a live outside call in flight, or a hole
//! of the recorded journal not yet reached) keeps `written` at or below
//! it, so that no later write can skip it.
//!
//! Calls that repeat share an entry (`runs`); what a lambda that gives up
//! leaves of its journal is decided in `cut`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Instant, SystemTime};

use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use waft_core::limits::{MAX_JOURNAL_BYTES, MAX_JOURNAL_ENTRIES};
use waft_core::model::JournalEntry;

use super::answer::{Digest, decode};
use super::cut::Outcomes;
use super::{Divergence, Halt, Parting, Step, unix_millis};
use crate::TaskHost;
use crate::redact::Redactor;

pub(crate) use super::cut::Outside;

/// A live call's place in the journal. Dropped without
/// [`Journal::record`], the call never answered: its place is written as
/// a hole, made live again on replay.
pub(crate) struct Ticket {
    pub(super) place: Place,
    started: Instant,
}

/// A call whose arguments are not all known yet (an HTTP request whose
/// body is still being written): its place is taken now, its match
/// decided by [`Reserved::resolve`].
pub(crate) struct Reserved {
    place: Place,
    started: Instant,
    /// The entry at its place, when the journal has one to replay.
    expected: Option<JournalEntry>,
}

/// A place taken in the journal; given up as a hole when dropped unused.
pub(super) struct Place {
    journal: Journal,
    seq: u32,
    call: &'static str,
    used: bool,
}

impl Drop for Place {
    fn drop(&mut self) {
        if !self.used {
            self.journal.abandon(self.seq);
        }
    }
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
    /// A place was resolved or given up (see [`Journal::settled`]).
    resolved: Notify,
    /// Whether calls are still answered from the journal (the log marks
    /// what the lambda logs meanwhile).
    replaying: Arc<AtomicBool>,
    /// Whether a call the journal does not answer stops the execution
    /// instead of running live (see [`Journal::stop_at_end`]).
    stop_at_end: AtomicBool,
}

/// A place not yet in the store as it should be (see `writes`).
pub(super) enum Slot {
    /// Answered: by one call, or by a run of `calls` calls whose answers
    /// follow each other in the entry's (see [`Journal::answer`]).
    Done { entry: JournalEntry, calls: u32 },
    /// Answered by a call and by `more` calls after it that got the same
    /// answer (see [`Journal::repeated`]).
    Repeated { entry: JournalEntry, more: u64 },
    /// A live call not yet answered.
    InFlight(&'static str),
    /// A live call that will never answer: a hole, but nothing to wait for.
    Abandoned(&'static str),
}

pub(super) struct State {
    /// The journal the execution started from.
    pub(super) recorded: Vec<JournalEntry>,
    /// The place of the next call.
    pub(super) next: u32,
    /// The store holds what this execution wants below this place.
    pub(super) written: u32,
    /// Places at or above `written` that differ from `recorded`.
    pub(super) unwritten: BTreeMap<u32, Slot>,
    /// Places below `written` this execution made live, as written, from
    /// where a lambda that gives up may still need them on (see `cut`).
    pub(super) kept: BTreeMap<u32, JournalEntry>,
    /// Places taken but not yet matched or made live.
    pub(super) unresolved: BTreeSet<u32>,
    /// A recorded run being replayed: its place, and where its next answer
    /// starts.
    pub(super) replaying_run: Option<(u32, usize)>,
    /// A recorded repeated answer being replayed: its place, the length
    /// of the answer, and how many more calls it answers.
    pub(super) replaying_repeat: Option<(u32, usize, u64)>,
    /// The place of a live run the next call of its kind may join.
    pub(super) live_run: Option<u32>,
    /// Places this execution made live.
    pub(super) live: BTreeSet<u32>,
    /// How its outside calls went (see `cut`).
    pub(super) outcomes: Outcomes,
    /// Entries answered from (a run counts once).
    pub(super) replayed: u32,
    /// Bytes of the entries, recorded ones included.
    pub(super) bytes: usize,
    pub(super) halt: Option<Halt>,
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
        let outcomes = Outcomes::of(&recorded);
        Self {
            inner: Arc::new(Inner {
                host,
                attempt,
                redactor,
                replaying: Arc::new(AtomicBool::new(len > 0)),
                stop_at_end: AtomicBool::new(false),
                writing: tokio::sync::Mutex::new(()),
                resolved: Notify::new(),
                state: Mutex::new(State {
                    recorded,
                    next: 0,
                    written: len,
                    unwritten: BTreeMap::new(),
                    kept: BTreeMap::new(),
                    unresolved: BTreeSet::new(),
                    replaying_run: None,
                    replaying_repeat: None,
                    live_run: None,
                    live: BTreeSet::new(),
                    outcomes,
                    replayed: 0,
                    bytes,
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

    /// Makes the first call the journal does not answer (past its end, or
    /// a hole) stop the execution with [`Halt::Ended`] instead of running
    /// live: a replay that shows an attempt as it happened and nothing more.
    pub(crate) fn stop_at_end(&self) {
        self.inner.stop_at_end.store(true, Ordering::Relaxed);
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The platform the journal is written to.
    pub(crate) fn host(&self) -> Arc<dyn TaskHost> {
        self.inner.host.clone()
    }

    /// The secrets kept out of the journal's summaries and digests.
    pub(crate) fn redactor(&self) -> Arc<Redactor> {
        self.inner.redactor.clone()
    }

    /// Whether calls are still answered from the journal, for the log.
    pub(crate) fn replaying_flag(&self) -> Arc<AtomicBool> {
        self.inner.replaying.clone()
    }

    /// Says whether calls are still answered from the journal.
    pub(super) fn set_replaying(&self, replaying: bool) {
        self.inner.replaying.store(replaying, Ordering::Relaxed);
    }

    /// What stopped the execution, if the journal did.
    pub(crate) fn halt(&self) -> Option<Halt> {
        self.lock().halt.clone()
    }

    /// Entries of the journal answered from so far.
    pub(crate) fn replayed(&self) -> u32 {
        self.lock().replayed
    }

    /// Whether no outside call is in flight (nothing would be lost if the
    /// execution stopped now).
    pub(crate) fn quiet(&self) -> bool {
        let state = self.lock();
        state.unresolved.is_empty()
            && !state
                .unwritten
                .values()
                .any(|slot| matches!(slot, Slot::InFlight(_)))
    }

    /// Whether the next call is made live: the recorded journal holds
    /// nothing at its place (or a hole), and the execution does not stop
    /// there instead ([`Journal::stop_at_end`]: a wait then asks nothing,
    /// and its call stops the execution).
    pub(crate) fn live_next(&self) -> bool {
        let state = self.lock();
        state.replaying_run.is_none()
            && state.replaying_repeat.is_none()
            && state.recorded.get(state.next as usize).is_none_or(is_hole)
            && !self.inner.stop_at_end.load(Ordering::Relaxed)
    }

    /// Takes the place of a call named `call` whose arguments digest to
    /// `digest`: answered from the journal, or to be made live.
    pub(crate) fn call(&self, call: &'static str, digest: &Digest) -> Result<Step, Halt> {
        self.reserve(call)?.resolve(digest)
    }

    pub(super) fn unreadable(&self, seq: u32, call: &str) -> Halt {
        let recorded = self.lock().recorded.get(seq as usize).cloned();
        let (recorded, summary) =
            recorded.map_or_else(Default::default, |entry| (entry.call, entry.summary));
        self.stop(Halt::Diverged(Divergence {
            seq,
            recorded,
            summary,
            called: call.to_owned(),
            parting: Parting::Unreadable,
        }))
    }

    /// A replayed answer of `call` at `seq`; one that does not read as
    /// such stops the execution, as a divergence.
    pub(crate) fn decode<T: DeserializeOwned>(
        &self,
        seq: u32,
        call: &str,
        answer: &[u8],
    ) -> Result<T, Halt> {
        decode(answer).ok_or_else(|| self.unreadable(seq, call))
    }

    pub(super) fn stop(&self, halt: Halt) -> Halt {
        let halt = self.lock().stop(halt);
        self.inner.resolved.notify_waiters();
        halt
    }

    /// Takes the place of a call whose arguments are not all known yet.
    pub(crate) fn reserve(&self, call: &'static str) -> Result<Reserved, Halt> {
        let mut state = self.lock();
        if let Some(halt) = &state.halt {
            return Err(halt.clone());
        }
        state.live_run = None;
        let unfinished = state
            .replaying_run
            .take()
            .map(|(seq, _)| seq)
            .or(state.replaying_repeat.take().map(|(seq, _, _)| seq));
        if let Some(seq) = unfinished {
            let entry = &state.recorded[seq as usize];
            let divergence = Divergence {
                seq,
                recorded: entry.call.clone(),
                summary: entry.summary.clone(),
                called: call.to_owned(),
                parting: Parting::FewerCalls,
            };
            drop(state);
            return Err(self.stop(Halt::Diverged(divergence)));
        }
        let seq = state.next;
        if seq >= MAX_JOURNAL_ENTRIES {
            drop(state);
            return Err(self.stop(Halt::Full(format!(
                "the journal holds its most entries, {MAX_JOURNAL_ENTRIES}: \
                 the execution made too many host calls"
            ))));
        }
        state.next += 1;
        let expected = match state.recorded.get(seq as usize) {
            Some(entry) if entry.call != call => {
                let divergence = diverged(seq, entry, call, Parting::OtherCall);
                drop(state);
                return Err(self.stop(Halt::Diverged(divergence)));
            }
            // A hole: the call never answered; it runs live at its place.
            Some(entry) if is_hole(entry) => None,
            Some(entry) => Some(entry.clone()),
            None => None,
        };
        if expected.is_none() && self.inner.stop_at_end.load(Ordering::Relaxed) {
            drop(state);
            return Err(self.stop(Halt::Ended {
                seq,
                call: call.to_owned(),
            }));
        }
        if expected.is_none() {
            state.unwritten.insert(seq, Slot::InFlight(call));
            state.live.insert(seq);
            state.written = state.written.min(seq);
        }
        state.unresolved.insert(seq);
        let replaying = (state.next as usize) < state.recorded.len();
        self.set_replaying(replaying);
        Ok(Reserved {
            place: Place {
                journal: self.clone(),
                seq,
                call,
                used: false,
            },
            started: Instant::now(),
            expected,
        })
    }

    /// Waits until every place before `seq` that the recorded journal
    /// holds is matched (or made live, when a hole): a call that reaches
    /// outside waits for it, so that nothing live goes out after a mismatch
    /// found later. Places past the recorded journal cannot mismatch, and
    /// are not waited for (their calls may still be writing a body).
    pub(crate) async fn settled(&self, seq: u32) -> Result<(), Halt> {
        loop {
            let resolved = self.inner.resolved.notified();
            tokio::pin!(resolved);
            resolved.as_mut().enable();
            {
                let state = self.lock();
                if let Some(halt) = &state.halt {
                    return Err(halt.clone());
                }
                let recorded = u32::try_from(state.recorded.len()).unwrap_or(u32::MAX);
                if state.unresolved.range(..seq.min(recorded)).next().is_none() {
                    return Ok(());
                }
            }
            resolved.await;
        }
    }

    /// Records the answer of a live call: `answer` as the lambda got it
    /// (encoded), `summary` for people (secrets are redacted from it
    /// here), and whether the call reached outside the sandbox.
    pub(crate) fn record(
        &self,
        ticket: Ticket,
        digest: &Digest,
        answer: Vec<u8>,
        summary: String,
        outside: Outside,
    ) -> Result<(), Halt> {
        self.record_as(ticket, digest, answer, summary, outside, false)
    }

    /// [`Journal::record`]; with `repeat`, as the first of calls that may
    /// get the same answer again (see [`Journal::repeated`]).
    pub(super) fn record_as(
        &self,
        mut ticket: Ticket,
        digest: &Digest,
        answer: Vec<u8>,
        summary: String,
        outside: Outside,
        repeat: bool,
    ) -> Result<(), Halt> {
        ticket.place.used = true;
        let seq = ticket.place.seq;
        let entry = JournalEntry {
            seq,
            call: ticket.place.call.to_owned(),
            digest: digest.to_vec(),
            answer,
            summary: self.inner.redactor.text(summary),
            outside: outside != Outside::No,
            attempt: self.inner.attempt,
            at: unix_millis(SystemTime::now()),
            took_us: u64::try_from(ticket.started.elapsed().as_micros()).unwrap_or(u64::MAX),
        };
        let mut state = self.lock();
        // A repeated answer may come to carry its count, a varint.
        state.bytes += entry.wire_size() + if repeat { 10 } else { 0 };
        if state.bytes > MAX_JOURNAL_BYTES {
            state
                .unwritten
                .insert(seq, Slot::Abandoned(ticket.place.call));
            drop(state);
            return Err(self.stop(full_of_bytes()));
        }
        state.saw_outside(seq, outside);
        let slot = if repeat {
            Slot::Repeated { entry, more: 0 }
        } else {
            Slot::Done { entry, calls: 1 }
        };
        state.unwritten.insert(seq, slot);
        Ok(())
    }

    /// Entry `seq`, replayed, answered an outside call as `outside` says:
    /// a lambda that gives up after a failed call makes it again, whether
    /// this execution or an earlier one got the failure.
    pub(crate) fn replayed_outside(&self, seq: u32, outside: Outside) {
        self.lock().saw_outside(seq, outside);
    }

    /// A place given up before its call answered.
    fn abandon(&self, seq: u32) {
        let mut state = self.lock();
        state.unresolved.remove(&seq);
        if let Some(Slot::InFlight(call)) = state.unwritten.get(&seq) {
            let call = *call;
            state.unwritten.insert(seq, Slot::Abandoned(call));
        }
        drop(state);
        self.inner.resolved.notify_waiters();
    }

    /// Holds writes to the store to one at a time, in order.
    pub(super) async fn one_write_at_a_time(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.inner.writing.lock().await
    }
}

impl State {
    pub(super) fn stop(&mut self, halt: Halt) -> Halt {
        self.halt = Some(halt.clone());
        halt
    }
}

impl Reserved {
    /// Decides, now that its arguments digest to `digest`, whether the call
    /// is answered from the journal or made live.
    pub(crate) fn resolve(mut self, digest: &Digest) -> Result<Step, Halt> {
        let journal = self.place.journal.clone();
        let seq = self.place.seq;
        let expected = self.expected.take();
        let step = {
            let mut state = journal.lock();
            state.unresolved.remove(&seq);
            if let Some(halt) = &state.halt {
                Err(halt.clone())
            } else {
                match expected {
                    None => Ok(None),
                    Some(entry) if entry.digest != digest.as_slice() => {
                        Err(state.stop(Halt::Diverged(diverged(
                            seq,
                            &entry,
                            self.place.call,
                            Parting::OtherArguments,
                        ))))
                    }
                    Some(entry) => {
                        state.replayed += 1;
                        if entry.outside {
                            // Until its caller says how it went.
                            state.outcomes.reporting(seq);
                        }
                        Ok(Some(entry.answer))
                    }
                }
            }
        };
        journal.inner.resolved.notify_waiters();
        match step? {
            Some(answer) => {
                self.place.used = true;
                Ok(Step::Replay { seq, answer })
            }
            None => Ok(Step::Live(Ticket {
                place: std::mem::replace(
                    &mut self.place,
                    Place {
                        journal,
                        seq,
                        call: "",
                        used: true,
                    },
                ),
                started: self.started,
            })),
        }
    }

    /// Its place in the journal.
    pub(crate) fn seq(&self) -> u32 {
        self.place.seq
    }
}

impl Ticket {
    /// Its place in the journal.
    pub(crate) fn seq(&self) -> u32 {
        self.place.seq
    }
}

pub(super) fn full_of_bytes() -> Halt {
    Halt::Full(format!(
        "the journal would hold more than its most bytes, {} MiB",
        MAX_JOURNAL_BYTES >> 20
    ))
}

pub(super) fn is_hole(entry: &JournalEntry) -> bool {
    entry.digest.is_empty()
}

fn diverged(seq: u32, entry: &JournalEntry, call: &str, parting: Parting) -> Divergence {
    Divergence {
        seq,
        recorded: entry.call.clone(),
        summary: entry.summary.clone(),
        called: call.to_owned(),
        parting,
    }
}

#[cfg(test)]
pub(super) mod tests;
