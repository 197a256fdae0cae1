//! One execution's journal: the places its calls take, what it replays,
//! what it records live, and what the store must be written.
//!
//! The store's journal is rewritten from `written` on at each durability
//! point: below it, the store holds what this execution wants. A place
//! whose answer is still to come (a live outside call in flight, or a hole
//! of the recorded journal not yet reached) keeps `written` at or below
//! it, so that no later write can skip it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Instant, SystemTime};

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use waft_core::limits::{MAX_JOURNAL_BYTES, MAX_JOURNAL_ENTRIES};
use waft_core::model::{JournalEntry, JournalWrite};

use super::answer::{Digest, decode, encode};
use super::{Halt, Step, unix_millis};
use crate::redact::Redactor;
use crate::{LeaseLost, TaskHost};

/// A live call's place in the journal. Dropped without
/// [`Journal::record`], the call never answered: its place is written as
/// a hole, made live again on replay.
pub(crate) struct Ticket {
    place: Place,
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
struct Place {
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

/// A place not yet in the store as it should be.
enum Slot {
    /// Answered: by one call, or by a run of `calls` calls (see
    /// [`Journal::answer`]).
    Done { entry: JournalEntry, calls: u32 },
    /// A live call not yet answered.
    InFlight(&'static str),
    /// A live call that will never answer: a hole, but nothing to wait for.
    Abandoned(&'static str),
}

struct State {
    /// The journal the execution started from.
    recorded: Vec<JournalEntry>,
    /// The place of the next call.
    next: u32,
    /// The store holds what this execution wants below this place.
    written: u32,
    /// Places at or above `written` that differ from `recorded`.
    unwritten: BTreeMap<u32, Slot>,
    /// Places taken but not yet matched or made live.
    unresolved: BTreeSet<u32>,
    /// A recorded run being replayed: its place, and where its next answer
    /// starts.
    replaying_run: Option<(u32, usize)>,
    /// The place of a live run the next call of its kind may join.
    live_run: Option<u32>,
    /// Places this execution made live.
    live: BTreeSet<u32>,
    /// The last outside call, made live or replayed, and whether it
    /// failed.
    last_outside: Option<(u32, bool)>,
    /// Entries answered from (a run counts once).
    replayed: u32,
    /// Bytes of the entries, recorded ones included.
    bytes: usize,
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
                stop_at_end: AtomicBool::new(false),
                writing: tokio::sync::Mutex::new(()),
                resolved: Notify::new(),
                state: Mutex::new(State {
                    recorded,
                    next: 0,
                    written: len,
                    unwritten: BTreeMap::new(),
                    unresolved: BTreeSet::new(),
                    replaying_run: None,
                    live_run: None,
                    live: BTreeSet::new(),
                    last_outside: None,
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

    fn lock(&self) -> MutexGuard<'_, State> {
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
            && state.recorded.get(state.next as usize).is_none_or(is_hole)
            && !self.inner.stop_at_end.load(Ordering::Relaxed)
    }

    /// Takes the place of a call named `call` whose arguments digest to
    /// `digest`: answered from the journal, or to be made live.
    pub(crate) fn call(&self, call: &'static str, digest: &Digest) -> Result<Step, Halt> {
        self.reserve(call)?.resolve(digest)
    }

    /// Answers a call that reaches nothing outside the sandbox: from the
    /// journal (and `true`), or live by `live` (and `false`), recorded
    /// with `summary` of its answer.
    ///
    /// With `run`, calls of one kind that follow each other (a loop reading
    /// the clock) share one entry, whose answer is theirs one after the
    /// other: a busy loop costs the journal bytes, not entries.
    pub(crate) fn answer<T: Serialize + DeserializeOwned>(
        &self,
        call: &'static str,
        digest: &Digest,
        run: bool,
        live: impl FnOnce() -> T,
        summary: impl FnOnce(&T) -> String,
    ) -> Result<(T, bool), Halt> {
        if !run {
            return match self.call(call, digest)? {
                Step::Replay { seq, answer } => Ok((self.decode(seq, call, &answer)?, true)),
                Step::Live(ticket) => {
                    let answer = live();
                    let text = summary(&answer);
                    self.record(ticket, digest, encode(&answer), text, Outside::No)?;
                    Ok((answer, false))
                }
            };
        }
        if let Some(answer) = self.replayed_run(call, digest)? {
            return Ok((answer, true));
        }
        let answer = live();
        let encoded = encode(&answer);
        if self.extend_run(call, digest, &encoded)? {
            return Ok((answer, false));
        }
        match self.call(call, digest)? {
            Step::Replay { seq, answer } => {
                let (value, rest) = postcard::take_from_bytes::<T>(&answer)
                    .map_err(|_| self.unreadable(seq, call))?;
                if !rest.is_empty() {
                    self.lock().replaying_run = Some((seq, answer.len() - rest.len()));
                    self.inner.replaying.store(true, Ordering::Relaxed);
                }
                Ok((value, true))
            }
            Step::Live(ticket) => {
                let seq = ticket.seq();
                let text = summary(&answer);
                self.record(ticket, digest, encoded, text, Outside::No)?;
                self.lock().live_run = Some(seq);
                Ok((answer, false))
            }
        }
    }

    /// The next answer of the recorded run being replayed, when `call` is
    /// of its kind.
    fn replayed_run<T: DeserializeOwned>(
        &self,
        call: &'static str,
        digest: &Digest,
    ) -> Result<Option<T>, Halt> {
        let mut state = self.lock();
        let Some((seq, offset)) = state.replaying_run else {
            return Ok(None);
        };
        let entry = &state.recorded[seq as usize];
        if entry.call != call || entry.digest != digest.as_slice() {
            // The call takes the next place, where it diverges.
            return Ok(None);
        }
        let Ok((value, rest)) = postcard::take_from_bytes::<T>(&entry.answer[offset..]) else {
            drop(state);
            return Err(self.unreadable(seq, call));
        };
        let consumed = entry.answer.len() - rest.len();
        state.replaying_run = (!rest.is_empty()).then_some((seq, consumed));
        if state.replaying_run.is_none() {
            let replaying = (state.next as usize) < state.recorded.len();
            self.inner.replaying.store(replaying, Ordering::Relaxed);
        }
        Ok(Some(value))
    }

    /// Adds a live answer of `call` to the live run it continues (the last
    /// place taken, of its kind); false when it continues none.
    fn extend_run(&self, call: &'static str, digest: &Digest, answer: &[u8]) -> Result<bool, Halt> {
        let mut state = self.lock();
        if let Some(halt) = &state.halt {
            return Err(halt.clone());
        }
        let Some(seq) = state.live_run else {
            return Ok(false);
        };
        let Some(Slot::Done { entry, calls }) = state.unwritten.get_mut(&seq) else {
            return Ok(false);
        };
        if entry.call != call || entry.digest != digest.as_slice() {
            return Ok(false);
        }
        entry.answer.extend_from_slice(answer);
        *calls += 1;
        state.bytes += answer.len();
        if state.bytes > MAX_JOURNAL_BYTES {
            drop(state);
            return Err(self.stop(full_of_bytes()));
        }
        Ok(true)
    }

    fn unreadable(&self, seq: u32, call: &str) -> Halt {
        self.stop(Halt::Diverged(format!(
            "diverged at entry {seq}: its answer does not read as an answer of {call}"
        )))
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

    fn stop(&self, halt: Halt) -> Halt {
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
        if let Some((seq, _)) = state.replaying_run.take() {
            let entry = &state.recorded[seq as usize];
            let message = format!(
                "diverged at entry {seq}: the journal has more calls of {} ({}), the lambda \
                 called {call}",
                entry.call, entry.summary
            );
            drop(state);
            return Err(self.stop(Halt::Diverged(message)));
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
                let message = diverged(seq, entry, call);
                drop(state);
                return Err(self.stop(Halt::Diverged(message)));
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
        self.inner.replaying.store(replaying, Ordering::Relaxed);
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
        mut ticket: Ticket,
        digest: &Digest,
        answer: Vec<u8>,
        summary: String,
        outside: Outside,
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
        state.bytes += entry.wire_size();
        if state.bytes > MAX_JOURNAL_BYTES {
            state
                .unwritten
                .insert(seq, Slot::Abandoned(ticket.place.call));
            drop(state);
            return Err(self.stop(full_of_bytes()));
        }
        state.saw_outside(seq, outside);
        state.unwritten.insert(seq, Slot::Done { entry, calls: 1 });
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

    /// A durability point: writes the journal as far as it goes to the
    /// store, under the execution's lease. `Err` when the lease is gone.
    pub(crate) async fn commit(&self) -> Result<(), LeaseLost> {
        let _one_at_a_time = self.inner.writing.lock().await;
        let (write, waiting) = self.lock().pending();
        self.inner.host.journal(write.clone()).await?;
        let mut state = self.lock();
        // The store holds the write now, up to its first place still
        // waiting for an answer; a place taken meanwhile lowered `written`
        // on its own.
        if state.written >= write.from {
            state.written = waiting.unwrap_or_else(|| write.end());
        }
        let keep_from = state.written;
        state.unwritten = state.unwritten.split_off(&keep_from);
        Ok(())
    }

    /// What the task's journal should become beyond what was written, once
    /// the execution ended. Calls still in flight are written as holes.
    ///
    /// `cut` when the lambda answered `retriable` or `fatal`: when the last
    /// outside call it saw (live, or replayed: an execution lost before it
    /// could give up may have left a failure) failed (no answer, a 5xx or
    /// 429, a child refused for now), the journal ends before that call,
    /// which the next attempt makes again; otherwise it ends before the
    /// first call made live after that one (or before the first live call,
    /// when it saw none that reached outside), so that a lambda retrying
    /// until the clock says so reads the clock anew. What reached outside and
    /// answered is never made again.
    pub(crate) fn finish(&self, cut: bool) -> JournalWrite {
        let state = self.lock();
        let (mut write, _) = state.pending();
        // A replayed failure is not cut at when the recorded journal holds
        // an answered outside call after it (a replay that gave up sooner
        // than the run it replays): what answered is never made again.
        let answered_after = |seq: u32| {
            state
                .recorded
                .iter()
                .skip(seq as usize + 1)
                .any(|entry| entry.outside && !is_hole(entry))
        };
        let cut_at = match state.last_outside {
            Some((seq, true)) if !answered_after(seq) => Some(seq),
            Some((seq, _)) => state.live.range(seq + 1..).next().copied(),
            None => state.live.first().copied(),
        };
        if cut && let Some(at) = cut_at {
            if at < write.from {
                write.from = at;
                write.entries.clear();
            } else {
                write.entries.truncate((at - write.from) as usize);
            }
        }
        write
    }
}

/// Whether a live call reached outside the sandbox, and how it went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outside {
    No,
    Answered,
    /// No answer, or one that asks to try again (a 5xx, a 429, a child
    /// refused for now).
    Failed,
}

impl State {
    fn saw_outside(&mut self, seq: u32, outside: Outside) {
        if outside != Outside::No && self.last_outside.is_none_or(|(last, _)| seq > last) {
            self.last_outside = Some((seq, outside == Outside::Failed));
        }
    }

    fn stop(&mut self, halt: Halt) -> Halt {
        self.halt = Some(halt.clone());
        halt
    }

    /// The write that brings the store's journal to what this execution
    /// knows, and the first place in it still waiting for an answer: a
    /// live call in flight, or a hole of the recorded journal not yet
    /// made live.
    fn pending(&self) -> (JournalWrite, Option<u32>) {
        let recorded = u32::try_from(self.recorded.len()).unwrap_or(u32::MAX);
        let end = self.next.max(recorded);
        let mut waiting = None;
        let mut entries = Vec::new();
        for seq in self.written..end {
            let entry = match self.unwritten.get(&seq) {
                Some(Slot::Done { entry, calls: 1 }) => entry.clone(),
                Some(Slot::Done { entry, calls }) => JournalEntry {
                    summary: format!("{}, and {} more like it", entry.summary, calls - 1),
                    ..entry.clone()
                },
                Some(Slot::InFlight(call)) => {
                    waiting = waiting.or(Some(seq));
                    hole(seq, call)
                }
                Some(Slot::Abandoned(call)) => hole(seq, call),
                None => match self.recorded.get(seq as usize) {
                    Some(entry) => {
                        if is_hole(entry) {
                            waiting = waiting.or(Some(seq));
                        }
                        entry.clone()
                    }
                    // Taken by a call that ended in a halt.
                    None => break,
                },
            };
            entries.push(entry);
        }
        let write = JournalWrite {
            from: self.written,
            entries,
        };
        (write, waiting)
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
                        Err(state.stop(Halt::Diverged(format!(
                            "diverged at entry {seq}: the journal has {} ({}), the lambda \
                             called {} with other arguments",
                            entry.call, entry.summary, self.place.call
                        ))))
                    }
                    Some(entry) => {
                        state.replayed += 1;
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

fn full_of_bytes() -> Halt {
    Halt::Full(format!(
        "the journal would hold more than its most bytes, {} MiB",
        MAX_JOURNAL_BYTES >> 20
    ))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RecordingHost;
    use crate::durable::digest;

    const HTTP: &str = "wasi:http/outgoing-handler.handle";
    const CLOCK: &str = "wasi:clocks/wall-clock.now";

    fn journal(recorded: Vec<JournalEntry>) -> (Journal, Arc<RecordingHost>) {
        let host = Arc::new(RecordingHost::default());
        let journal = Journal::new(host.clone(), 2, recorded, Arc::default());
        (journal, host)
    }

    /// Makes `call` live (it must be) and records `outside` for it.
    fn live(journal: &Journal, call: &'static str, n: u8, outside: Outside) {
        let d = digest(call, &n);
        let Step::Live(ticket) = journal.call(call, &d).unwrap() else {
            panic!("{call} should run live");
        };
        journal
            .record(ticket, &d, vec![n], format!("{n}"), outside)
            .unwrap();
    }

    fn entries(write: &JournalWrite) -> Vec<(u32, bool)> {
        write.entries.iter().map(|e| (e.seq, is_hole(e))).collect()
    }

    #[tokio::test]
    async fn a_call_in_flight_is_written_as_a_hole_and_written_again_once_answered() {
        let (journal, host) = journal(Vec::new());
        live(&journal, CLOCK, 0, Outside::No);
        let in_flight = journal.reserve(HTTP).unwrap();
        let d = digest(HTTP, &1u8);
        let Step::Live(first) = in_flight.resolve(&d).unwrap() else {
            panic!()
        };
        live(&journal, HTTP, 2, Outside::Answered);
        journal.commit().await.unwrap();
        journal
            .record(first, &d, vec![1], "1".into(), Outside::Answered)
            .unwrap();
        journal.commit().await.unwrap();
        let writes = host.journal_writes();
        assert_eq!(entries(&writes[0]), [(0, false), (1, true), (2, false)]);
        // The hole kept its place: the next write starts there.
        assert_eq!(writes[1].from, 1);
        assert_eq!(entries(&writes[1]), [(1, false), (2, false)]);
    }

    #[tokio::test]
    async fn a_call_given_up_stays_a_hole_and_later_writes_go_past_it() {
        let (journal, host) = journal(Vec::new());
        drop(journal.reserve(HTTP).unwrap());
        live(&journal, HTTP, 1, Outside::Answered);
        journal.commit().await.unwrap();
        live(&journal, HTTP, 2, Outside::Answered);
        journal.commit().await.unwrap();
        let writes = host.journal_writes();
        assert_eq!(entries(&writes[0]), [(0, true), (1, false)]);
        assert_eq!(writes[1].from, 2, "nothing waits on a call given up");
    }

    fn read_clock(journal: &Journal, value: u64) -> (u64, bool) {
        let d = digest("wasi:clocks/monotonic-clock.now", &());
        let call = "wasi:clocks/monotonic-clock.now";
        journal
            .answer(call, &d, true, || value, |v| format!("{v}"))
            .unwrap()
    }

    #[test]
    fn clock_reads_that_follow_each_other_share_an_entry_and_replay_one_by_one() {
        let (first, _) = journal(Vec::new());
        for value in [5, 6, 7] {
            assert_eq!(read_clock(&first, value), (value, false));
        }
        live(&first, HTTP, 0, Outside::Answered);
        assert_eq!(read_clock(&first, 9), (9, false));
        let recorded = first.finish(false).entries;
        assert_eq!(recorded.len(), 3, "{recorded:?}");
        assert!(
            recorded[0].summary.ends_with("and 2 more like it"),
            "{}",
            recorded[0].summary
        );

        let (again, _) = journal(recorded.clone());
        for value in [5, 6, 7] {
            assert_eq!(read_clock(&again, 100), (value, true));
        }
        assert!(matches!(
            again.call(HTTP, &digest(HTTP, &0u8)),
            Ok(Step::Replay { .. })
        ));
        assert_eq!(read_clock(&again, 100), (9, true));
        assert_eq!(read_clock(&again, 100), (100, false), "past the end: live");
        assert_eq!(again.replayed(), 3, "entries, a run counting once");

        // Fewer reads than the journal has, then another call: divergence.
        let (fewer, _) = journal(recorded);
        read_clock(&fewer, 100);
        let diverged = fewer.call(HTTP, &digest(HTTP, &0u8));
        assert!(
            matches!(&diverged, Err(Halt::Diverged(m)) if m.contains("more calls of")),
            "{:?}",
            diverged.err()
        );
    }

    /// A platform whose journal writes wait for a permit each.
    struct GatedHost {
        gate: tokio::sync::Semaphore,
        writes: Mutex<Vec<JournalWrite>>,
    }

    #[async_trait::async_trait]
    impl TaskHost for GatedHost {
        async fn heartbeat(&self, _: Option<String>) -> Result<(), LeaseLost> {
            Ok(())
        }
        async fn schedule(
            &self,
            _: crate::ChildRequest,
        ) -> Result<String, crate::ScheduleRejection> {
            Ok("child".into())
        }
        async fn journal(&self, write: JournalWrite) -> Result<(), LeaseLost> {
            self.writes.lock().unwrap().push(write);
            self.gate.acquire().await.unwrap().forget();
            Ok(())
        }
        async fn signal(&self, _: &str, _: u32) -> Result<Option<Vec<u8>>, crate::Unread> {
            Ok(None)
        }
        async fn children(
            &self,
            _: &[String],
        ) -> Result<waft_core::model::ChildrenState, crate::Unread> {
            Ok(waft_core::model::ChildrenState::Waiting { live: 1 })
        }
    }

    #[tokio::test]
    async fn a_hole_of_the_journal_reached_while_a_write_runs_is_written_once_answered() {
        let (first, _) = journal(Vec::new());
        live(&first, CLOCK, 0, Outside::No);
        let clock = first.finish(false).entries.remove(0);
        let recorded = vec![clock.clone(), hole(1, HTTP), hole(2, HTTP)];
        let host = Arc::new(GatedHost {
            gate: tokio::sync::Semaphore::new(0),
            writes: Mutex::default(),
        });
        let journal = Journal::new(host.clone(), 2, recorded, Arc::default());
        assert!(matches!(
            journal.call(CLOCK, &digest(CLOCK, &0u8)).unwrap(),
            Step::Replay { .. }
        ));
        live(&journal, HTTP, 1, Outside::Answered);
        // A write of hole 1's answer begins; hole 2 is reached meanwhile.
        let writing = journal.commit();
        tokio::pin!(writing);
        assert!(futures_poll(&mut writing).is_none());
        let d = digest(HTTP, &2u8);
        let Step::Live(ticket) = journal.reserve(HTTP).unwrap().resolve(&d).unwrap() else {
            panic!("a hole runs live")
        };
        host.gate.add_permits(1);
        writing.await.unwrap();
        journal
            .record(ticket, &d, vec![2], "2".into(), Outside::Answered)
            .unwrap();
        host.gate.add_permits(1);
        journal.commit().await.unwrap();
        let last = host.writes.lock().unwrap().pop().unwrap();
        assert_eq!(last.from, 2);
        assert_eq!(entries(&last), [(2, false)]);
    }

    #[tokio::test]
    async fn an_outside_call_waits_for_every_call_before_it_to_be_matched() {
        let (first, _) = journal(Vec::new());
        live(&first, HTTP, 0, Outside::Answered);
        let (journal, _) = journal(first.finish(false).entries);
        let earlier = journal.reserve(HTTP).unwrap();
        let later = journal.reserve(HTTP).unwrap();
        let Step::Live(ticket) = later.resolve(&digest(HTTP, &1u8)).unwrap() else {
            panic!("past the end: live")
        };
        let waiting = journal.settled(ticket.seq());
        tokio::pin!(waiting);
        assert!(
            futures_poll(&mut waiting).is_none(),
            "the earlier call is not matched yet"
        );
        // It mismatches: the later call must not go out.
        assert!(earlier.resolve(&digest(HTTP, &9u8)).is_err());
        assert!(matches!(waiting.await, Err(Halt::Diverged(_))));
    }

    #[test]
    fn giving_up_makes_a_failed_outside_call_again_and_keeps_an_answered_one() {
        let (journal, _) = journal(Vec::new());
        live(&journal, HTTP, 0, Outside::Answered);
        live(&journal, CLOCK, 1, Outside::No);
        live(&journal, HTTP, 2, Outside::Failed);
        assert_eq!(
            journal.finish(true).entries.len(),
            2,
            "ends before the failed call"
        );

        let (journal, _) = journal_with_answered_then_clock();
        assert_eq!(
            journal.finish(true).entries.len(),
            1,
            "ends before the clock read after it"
        );
        assert_eq!(journal.finish(false).entries.len(), 2);
    }

    /// A failure the journal holds (an execution that got it was lost
    /// before it could give up) is made again by the attempt that replays
    /// it and gives up: else every later attempt would replay the failure
    /// and give up again.
    #[test]
    fn giving_up_after_a_replayed_failure_makes_the_call_again() {
        let (first, _) = journal(Vec::new());
        live(&first, HTTP, 0, Outside::Answered);
        live(&first, HTTP, 1, Outside::Failed);
        let recorded = first.finish(false).entries;
        assert_eq!(recorded.len(), 2, "a lost execution keeps its journal");

        let (again, _) = journal(recorded);
        for n in 0..2u8 {
            let Step::Replay { seq, .. } = again.call(HTTP, &digest(HTTP, &n)).unwrap() else {
                panic!("entry {n} should replay");
            };
            let outside = if n == 1 {
                Outside::Failed
            } else {
                Outside::Answered
            };
            again.replayed_outside(seq, outside);
        }
        let write = again.finish(true);
        assert_eq!(
            (write.from, write.entries.len()),
            (1, 0),
            "the store's journal ends before the failed call"
        );

        // A replay that gives up at a failure its first run went past, to
        // an answered call: nothing is cut.
        let (first, _) = journal(Vec::new());
        live(&first, HTTP, 0, Outside::Failed);
        live(&first, HTTP, 1, Outside::Answered);
        let (again, _) = journal(first.finish(false).entries);
        let Step::Replay { seq, .. } = again.call(HTTP, &digest(HTTP, &0u8)).unwrap() else {
            panic!("entry 0 should replay");
        };
        again.replayed_outside(seq, Outside::Failed);
        let write = again.finish(true);
        assert_eq!((write.from, write.entries.len()), (2, 0), "{write:?}");
    }

    #[tokio::test]
    async fn a_call_past_the_recorded_journal_waits_for_no_live_call() {
        let (journal, _) = journal(Vec::new());
        let writing = journal.reserve(HTTP).unwrap();
        let Step::Live(later) = journal.call(HTTP, &digest(HTTP, &1u8)).unwrap() else {
            panic!("live")
        };
        let mut waiting = Box::pin(journal.settled(later.seq()));
        assert!(
            futures_poll(&mut waiting).is_some(),
            "a live place cannot mismatch: nothing to wait for"
        );
        drop(writing);
    }

    #[test]
    fn a_journal_stopping_at_its_end_stops_at_the_first_call_it_does_not_answer() {
        let (first, _) = journal(Vec::new());
        live(&first, CLOCK, 0, Outside::No);
        let (again, _) = journal(first.finish(false).entries);
        again.stop_at_end();
        assert!(matches!(
            again.call(CLOCK, &digest(CLOCK, &0u8)),
            Ok(Step::Replay { seq: 0, .. })
        ));
        let ended = Halt::Ended {
            seq: 1,
            call: HTTP.to_owned(),
        };
        assert_eq!(
            again.call(HTTP, &digest(HTTP, &1u8)).err(),
            Some(ended.clone())
        );
        assert_eq!(again.halt(), Some(ended));
        assert_eq!(again.replayed(), 1);
    }

    fn journal_with_answered_then_clock() -> (Journal, Arc<RecordingHost>) {
        let (journal, host) = journal(Vec::new());
        live(&journal, HTTP, 0, Outside::Answered);
        live(&journal, CLOCK, 1, Outside::No);
        (journal, host)
    }

    /// Polls a future once.
    fn futures_poll<F: Future + Unpin>(future: &mut F) -> Option<F::Output> {
        let waker = std::task::Waker::noop();
        let mut context = std::task::Context::from_waker(waker);
        match std::pin::Pin::new(future).poll(&mut context) {
            std::task::Poll::Ready(output) => Some(output),
            std::task::Poll::Pending => None,
        }
    }
}
