//! Durability points: what of an execution's journal the store must be
//! written, and what it holds once written.
//!
//! A write carries the journal from `written` on, as far as this execution
//! knows it: an entry for every answered place, a hole for every call still
//! in flight (made live again by a replay if the execution ends there).
//! Once the store holds it, `written` moves up to the first place still
//! waiting for an answer; entries below it leave memory, but for those a
//! lambda that gives up may still write around (see `cut`).

use std::collections::BTreeMap;

use waft_core::model::{JournalEntry, JournalWrite};

use super::answer::encode;
use super::journal::{Journal, Slot, State, is_hole};
use crate::LeaseLost;

impl Journal {
    /// A durability point: writes the journal as far as it goes to the
    /// store, under the execution's lease. `Err` when the lease is gone.
    pub(crate) async fn commit(&self) -> Result<(), LeaseLost> {
        let _one_at_a_time = self.one_write_at_a_time().await;
        let (write, waiting) = self.lock().pending();
        self.host().journal(write.clone()).await?;
        let mut state = self.lock();
        // The store holds the write now, up to its first place still
        // waiting for an answer; a place taken meanwhile lowered `written`
        // on its own.
        if state.written >= write.from {
            state.written = waiting.unwrap_or_else(|| write.end());
        }
        let keep_from = state.written;
        let tail = state.unwritten.split_off(&keep_from);
        let done = std::mem::replace(&mut state.unwritten, tail);
        state.keep(done);
        Ok(())
    }
}

impl State {
    /// The entry at `seq` as the store should hold it, `None` past the
    /// journal's end (or at a place a call took that ended in a halt).
    pub(super) fn entry(&self, seq: u32) -> Option<JournalEntry> {
        match self.unwritten.get(&seq) {
            Some(slot) => Some(slot.entry(seq)),
            None => self
                .kept
                .get(&seq)
                .or(self.recorded.get(seq as usize))
                .cloned(),
        }
    }

    /// Places just written to the store that this execution made live:
    /// kept from where a lambda that gives up may still rewrite them.
    fn keep(&mut self, written: BTreeMap<u32, Slot>) {
        let from = self.outcomes.rewritable_from(self);
        self.kept = self.kept.split_off(&from);
        for (seq, slot) in written.range(from..) {
            self.kept.insert(*seq, slot.entry(*seq));
        }
    }

    /// The write that brings the store's journal to what this execution
    /// knows, and the first place in it still waiting for an answer: a
    /// live call in flight, or a hole of the recorded journal not yet
    /// made live.
    pub(super) fn pending(&self) -> (JournalWrite, Option<u32>) {
        let recorded = u32::try_from(self.recorded.len()).unwrap_or(u32::MAX);
        let end = self.next.max(recorded);
        let mut waiting = None;
        let mut entries = Vec::new();
        for seq in self.written..end {
            let entry = match self.unwritten.get(&seq) {
                Some(slot @ Slot::InFlight(_)) => {
                    waiting = waiting.or(Some(seq));
                    slot.entry(seq)
                }
                Some(slot) => slot.entry(seq),
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

impl Slot {
    /// The entry the store holds for this place.
    fn entry(&self, seq: u32) -> JournalEntry {
        match self {
            Slot::Done { entry, calls: 1 } | Slot::Repeated { entry, more: 0 } => entry.clone(),
            Slot::Done { entry, calls } => JournalEntry {
                summary: format!("{}, and {} more like it", entry.summary, calls - 1),
                ..entry.clone()
            },
            Slot::Repeated { entry, more } => {
                let mut answer = entry.answer.clone();
                answer.extend_from_slice(&encode(more));
                JournalEntry {
                    answer,
                    summary: format!("{}, and {more} more like it", entry.summary),
                    ..entry.clone()
                }
            }
            Slot::InFlight(call) | Slot::Abandoned(call) => hole(seq, call),
        }
    }
}

/// An outside call that never answered, as written: no digest.
pub(super) fn hole(seq: u32, call: &str) -> JournalEntry {
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
