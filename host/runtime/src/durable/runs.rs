//! Calls that repeat share an entry, so that a lambda's journal grows with
//! what it learned rather than with how often it asked.
//!
//! Two kinds of repetition:
//!
//! - A *run* ([`Journal::answer`] with `run`): calls of one kind with the
//!   same arguments that follow each other (a loop reading the clock)
//!   share an entry whose answer is theirs, one after the other: each
//!   answer differs, so a busy loop costs the journal bytes, not entries.
//! - A *repeat* ([`Journal::repeated`]): calls of one kind with the same
//!   arguments that follow each other and get the same answer (a loop that
//!   heartbeats) share an entry that holds the answer once and how many
//!   more calls got it, as a varint after the answer: a million heartbeats
//!   cost one entry and a few bytes. An entry with no count is a single
//!   call, as every entry was before repeats.
//!
//! A replay answers each call from the entry in turn; a lambda that makes
//! another call before the entry is used up diverges there ("the journal
//! has more calls of …").

use serde::Serialize;
use serde::de::DeserializeOwned;
use waft_core::limits::MAX_JOURNAL_BYTES;

use super::answer::{Digest, encode};
use super::journal::{Journal, Outside, Slot, full_of_bytes};
use super::{Halt, Step};

impl Journal {
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
                    self.set_replaying(true);
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
            self.set_replaying(replaying);
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

    /// Answers a call whose answer tends to repeat (a heartbeat): from the
    /// journal (and `true`), or live by `live` (and `false`), recorded
    /// with `summary` of its answer. Calls with the same arguments that
    /// follow each other and get the same answer share one entry.
    ///
    /// A recorded entry of `call` whose digest is `also` matches too (the
    /// arguments a call was once matched by), so that a journal written
    /// before a call's arguments left its match still replays.
    pub(crate) async fn repeated<T, F>(
        &self,
        call: &'static str,
        digest: &Digest,
        also: Option<&Digest>,
        live: impl Fn() -> F,
        summary: impl FnOnce(&T) -> String,
    ) -> Result<(T, bool), Halt>
    where
        T: Serialize + DeserializeOwned,
        F: Future<Output = T>,
    {
        let digest = &self.as_recorded(call, digest, also);
        if let Some(answer) = self.replayed_repeat(call, digest)? {
            return Ok((answer, true));
        }
        // Asked live once only: an answer that does not continue the
        // repeat takes a place of its own.
        let mut asked = None;
        if self.repeating(call, digest) {
            let answer = live().await;
            if self.extend_repeat(call, digest, &encode(&answer))? {
                return Ok((answer, false));
            }
            asked = Some(answer);
        }
        match self.call(call, digest)? {
            Step::Replay { seq, answer } => {
                let (value, rest) = postcard::take_from_bytes::<T>(&answer)
                    .map_err(|_| self.unreadable(seq, call))?;
                if !rest.is_empty() {
                    let more = self.decode::<u64>(seq, call, rest)?;
                    if more > 0 {
                        let len = answer.len() - rest.len();
                        self.lock().replaying_repeat = Some((seq, len, more));
                        self.set_replaying(true);
                    }
                }
                Ok((value, true))
            }
            Step::Live(ticket) => {
                let seq = ticket.seq();
                let answer = match asked {
                    Some(answer) => answer,
                    None => live().await,
                };
                let text = summary(&answer);
                self.record_as(ticket, digest, encode(&answer), text, Outside::No, true)?;
                self.lock().live_run = Some(seq);
                Ok((answer, false))
            }
        }
    }

    /// `also` when the recorded journal's next entry is of `call` with it,
    /// else `digest`.
    fn as_recorded(&self, call: &str, digest: &Digest, also: Option<&Digest>) -> Digest {
        let state = self.lock();
        let next = state.recorded.get(state.next as usize);
        match (also, next) {
            (Some(also), Some(entry))
                if state.replaying_repeat.is_none()
                    && entry.call == call
                    && entry.digest == also.as_slice() =>
            {
                *also
            }
            _ => *digest,
        }
    }

    /// The next answer of the recorded repeat being replayed, when `call`
    /// is of its kind.
    fn replayed_repeat<T: DeserializeOwned>(
        &self,
        call: &'static str,
        digest: &Digest,
    ) -> Result<Option<T>, Halt> {
        let mut state = self.lock();
        let Some((seq, len, more)) = state.replaying_repeat else {
            return Ok(None);
        };
        let entry = &state.recorded[seq as usize];
        if entry.call != call || entry.digest != digest.as_slice() {
            // The call takes the next place, where it diverges.
            return Ok(None);
        }
        let Some(value) = super::answer::decode::<T>(&entry.answer[..len]) else {
            drop(state);
            return Err(self.unreadable(seq, call));
        };
        state.replaying_repeat = (more > 1).then_some((seq, len, more - 1));
        if state.replaying_repeat.is_none() {
            let replaying = (state.next as usize) < state.recorded.len();
            self.set_replaying(replaying);
        }
        Ok(Some(value))
    }

    /// Whether the last place taken is a live repeat of `call` with these
    /// arguments, which the call may join.
    fn repeating(&self, call: &'static str, digest: &Digest) -> bool {
        let state = self.lock();
        let Some(seq) = state.live_run else {
            return false;
        };
        matches!(
            state.unwritten.get(&seq),
            Some(Slot::Repeated { entry, .. })
                if entry.call == call && entry.digest == digest.as_slice()
        )
    }

    /// Counts a live answer of `call` in the live repeat it continues (the
    /// last place taken, of its kind and arguments, with this answer);
    /// false when it continues none.
    fn extend_repeat(
        &self,
        call: &'static str,
        digest: &Digest,
        answer: &[u8],
    ) -> Result<bool, Halt> {
        let mut state = self.lock();
        if let Some(halt) = &state.halt {
            return Err(halt.clone());
        }
        let Some(seq) = state.live_run else {
            return Ok(false);
        };
        let Some(Slot::Repeated { entry, more }) = state.unwritten.get_mut(&seq) else {
            return Ok(false);
        };
        if entry.call != call || entry.digest != digest.as_slice() || entry.answer != answer {
            return Ok(false);
        }
        *more += 1;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::durable::digest;
    use crate::durable::journal::tests::{HTTP, journal, live};

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
            matches!(&diverged, Err(Halt::Diverged(d)) if d.parting == crate::Parting::FewerCalls),
            "{:?}",
            diverged.err()
        );
    }

    const BEAT: &str = "waft:lambda/heartbeat.beat";

    async fn beat(
        journal: &Journal,
        note: Option<&str>,
        alive: bool,
    ) -> (Result<(), String>, bool) {
        let d = digest(BEAT, &note);
        let live = || async move {
            if alive {
                Ok(())
            } else {
                Err("lost".to_owned())
            }
        };
        journal
            .repeated(BEAT, &d, None, live, |_| "beat".to_owned())
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn beats_that_answer_the_same_share_an_entry_and_replay_one_by_one() {
        let (first, _) = journal(Vec::new());
        for _ in 0..1000 {
            assert_eq!(beat(&first, None, true).await, (Ok(()), false));
        }
        // Another note, then another answer: entries of their own.
        assert_eq!(beat(&first, Some("half way"), true).await, (Ok(()), false));
        assert_eq!(beat(&first, Some("half way"), true).await, (Ok(()), false));
        let lost = Err("lost".to_owned());
        assert_eq!(
            beat(&first, Some("half way"), false).await,
            (lost.clone(), false)
        );
        let recorded = first.finish(false).entries;
        let shape: Vec<_> = recorded.iter().map(|e| (e.seq, e.answer.len())).collect();
        assert_eq!(shape, [(0, 3), (1, 2), (2, 6)], "{recorded:?}");
        assert!(
            recorded[0].summary.ends_with("and 999 more like it"),
            "{}",
            recorded[0].summary
        );

        let (again, _) = journal(recorded.clone());
        for _ in 0..1000 {
            assert_eq!(beat(&again, None, false).await, (Ok(()), true));
        }
        for _ in 0..2 {
            assert_eq!(beat(&again, Some("half way"), false).await, (Ok(()), true));
        }
        assert_eq!(beat(&again, Some("half way"), true).await, (lost, true));
        assert_eq!(
            beat(&again, None, true).await,
            (Ok(()), false),
            "past the end: live"
        );
        assert_eq!(again.replayed(), 3, "entries, a repeat counting once");

        // Fewer beats than the journal has, then another call: divergence.
        let (fewer, _) = journal(recorded);
        let _ = beat(&fewer, None, true).await;
        let diverged = fewer.call(HTTP, &digest(HTTP, &0u8));
        assert!(
            matches!(&diverged, Err(Halt::Diverged(d)) if d.parting == crate::Parting::FewerCalls),
            "{:?}",
            diverged.err()
        );
    }

    #[tokio::test]
    async fn a_repeat_ends_at_any_other_call() {
        let (first, _) = journal(Vec::new());
        let _ = beat(&first, None, true).await;
        live(&first, HTTP, 0, Outside::Answered);
        let _ = beat(&first, None, true).await;
        let _ = beat(&first, None, true).await;
        let recorded = first.finish(false).entries;
        let shape: Vec<_> = recorded.iter().map(|e| e.answer.len()).collect();
        assert_eq!(shape, [1, 1, 2], "{recorded:?}");
    }

    /// A beat journaled when its note was part of its match replays when
    /// the match leaves the note out.
    #[tokio::test]
    async fn a_beat_recorded_by_its_former_match_still_replays() {
        let former = digest(BEAT, &Some("step 1"));
        let (first, _) = journal(Vec::new());
        let alive = || async { Ok::<(), String>(()) };
        let _ = first
            .repeated(BEAT, &former, None, alive, |_| "beat".into())
            .await
            .unwrap();
        let (again, _) = journal(first.finish(false).entries);
        let live = || async { Err::<(), String>("asked live".into()) };
        let now = digest(BEAT, &());
        let replayed = again
            .repeated(BEAT, &now, Some(&former), live, |_| String::new())
            .await
            .unwrap();
        assert_eq!(replayed, (Ok(()), true));
    }
}
