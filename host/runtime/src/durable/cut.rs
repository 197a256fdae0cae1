//! What a lambda that gives up leaves of its journal (README, rule 5).
//!
//! A lambda that answers `retriable` or `fatal` after an outside call that
//! failed (no answer, a 5xx or 429, a child refused for now) has that call
//! made again by the next attempt; an outside call that answered is never
//! made again. Concurrent calls (`Promise.all`, `asyncio.gather`) finish in
//! any order, so "after" is decided by what the lambda could have seen, not
//! by places: a failure is followed by giving up when no outside call that
//! answered was made after the lambda got it — after, meaning at a place
//! taken once the failure was in. Such a failure ends the journal when
//! nothing answered comes after its place, and is written as a hole
//! otherwise (an answered call that was in flight with it keeps its
//! entry); either way what the lambda did once it had the failure goes.
//! Without such a failure, the journal ends before the first call made live
//! after the last outside call, so that a lambda retrying until the clock
//! says so reads the clock anew.

use std::collections::{BTreeMap, BTreeSet};

use waft_core::model::{JournalEntry, JournalWrite};

use super::journal::{Journal, Slot, State, is_hole};

/// Whether a live call reached outside the sandbox, and how it went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outside {
    No,
    Answered,
    /// No answer, or one that asks to try again (a 5xx, a 429, a child
    /// refused for now).
    Failed,
}

/// How an execution's outside calls went, as far as the cut needs.
#[derive(Debug, Default)]
pub(super) struct Outcomes {
    /// Places of outside calls that answered (as asked, or failing): live,
    /// replayed, or in the recorded journal.
    answered: BTreeSet<u32>,
    /// Failed outside calls that no outside call answered after: each one's
    /// place, and the place the next call was to take when the failure
    /// came (calls from there on may have followed from it).
    failures: BTreeMap<u32, u32>,
    /// Replayed outside calls whose callers have not yet said how they went.
    reporting: BTreeSet<u32>,
}

impl Outcomes {
    /// Outcomes as the recorded journal leaves them: every outside call it
    /// holds answered.
    pub(super) fn of(recorded: &[JournalEntry]) -> Self {
        let answered = recorded
            .iter()
            .filter(|entry| entry.outside && !is_hole(entry))
            .map(|entry| entry.seq)
            .collect();
        Self {
            answered,
            ..Self::default()
        }
    }

    /// The outside call at `seq` went as `outside` says, the next call
    /// being due at `next`.
    pub(super) fn saw(&mut self, seq: u32, outside: Outside, next: u32) {
        self.reporting.remove(&seq);
        if outside == Outside::No {
            return;
        }
        self.answered.insert(seq);
        let last = self.answered.last().copied().unwrap_or(seq);
        self.failures.retain(|_, after| *after > last);
        if outside == Outside::Failed && next > last {
            self.failures.insert(seq, next);
        }
    }

    /// The replayed outside call at `seq` waits for its caller to say how
    /// it went.
    pub(super) fn reporting(&mut self, seq: u32) {
        self.reporting.insert(seq);
    }

    /// The lowest place a cut may still write a hole at: entries written
    /// from there on are kept in memory, to be written again around it.
    pub(super) fn rewritable_from(&self, state: &State) -> u32 {
        let in_flight = state
            .unwritten
            .iter()
            .find(|(_, slot)| matches!(slot, Slot::InFlight(_)))
            .map(|(seq, _)| *seq);
        [
            state.unresolved.first().copied(),
            in_flight,
            self.failures.keys().next().copied(),
            self.reporting.first().copied(),
        ]
        .into_iter()
        .flatten()
        .fold(state.next, u32::min)
    }

    /// `write` (what the store's journal should become) as a lambda that
    /// gave up leaves it.
    fn cut(&self, state: &State, mut write: JournalWrite) -> JournalWrite {
        // The last outside call that is not made again.
        let kept = self
            .answered
            .iter()
            .rev()
            .find(|seq| !self.failures.contains_key(seq))
            .copied();
        // Failures placed before an answered call are holes; each ends the
        // journal where what followed it begins, one placed after every
        // answered call at its place.
        let mut end: Option<u32> = None;
        let mut holes = Vec::new();
        for (&seq, &after) in &self.failures {
            let at = if kept.is_some_and(|kept| seq < kept) {
                holes.push(seq);
                after
            } else {
                seq
            };
            end = Some(end.map_or(at, |end| end.min(at)));
        }
        if self.failures.is_empty() {
            end = match kept {
                Some(kept) => state.live.range(kept + 1..).next().copied(),
                None => state.live.first().copied(),
            };
        }
        let from = holes.first().map_or(write.from, |&seq| seq.min(write.from));
        if from < write.from {
            let below: Option<Vec<_>> = (from..write.from).map(|seq| state.entry(seq)).collect();
            match below {
                Some(mut entries) => {
                    entries.append(&mut write.entries);
                    write.entries = entries;
                    write.from = from;
                }
                // Not kept: the journal ends at the failure instead.
                None => {
                    end = Some(end.map_or(from, |end| end.min(from)));
                    holes.clear();
                }
            }
        }
        for seq in holes {
            if let Some(entry) = write.entries.get_mut((seq - write.from) as usize) {
                *entry = made_again(entry);
            }
        }
        if let Some(at) = end {
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

/// A failed outside call as the next attempt finds it: a hole, made live
/// again at its place.
fn made_again(entry: &JournalEntry) -> JournalEntry {
    JournalEntry {
        digest: Vec::new(),
        answer: Vec::new(),
        summary: format!("{}, then the lambda gave up: made again", entry.summary),
        ..entry.clone()
    }
}

impl State {
    pub(super) fn saw_outside(&mut self, seq: u32, outside: Outside) {
        let next = self.next;
        self.outcomes.saw(seq, outside, next);
    }
}

impl Journal {
    /// What the task's journal should become beyond what was written, once
    /// the execution ended. Calls still in flight are written as holes.
    ///
    /// `cut` when the lambda answered `retriable` or `fatal`: see the
    /// module's doc. What reached outside and answered is never made again.
    pub(crate) fn finish(&self, cut: bool) -> JournalWrite {
        let state = self.lock();
        let (write, _) = state.pending();
        if cut {
            state.outcomes.cut(&state, write)
        } else {
            write
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::durable::Step;
    use crate::durable::digest;
    use crate::durable::journal::tests::{CLOCK, HTTP, entries, journal, live};

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

    fn journal_with_answered_then_clock() -> (Journal, std::sync::Arc<crate::RecordingHost>) {
        let (journal, host) = journal(Vec::new());
        live(&journal, HTTP, 0, Outside::Answered);
        live(&journal, CLOCK, 1, Outside::No);
        (journal, host)
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

    /// Takes the places of `n` concurrent calls of HTTP, all live.
    fn in_flight(journal: &Journal, n: u8) -> Vec<Option<crate::durable::Ticket>> {
        (0..n)
            .map(|n| match journal.call(HTTP, &digest(HTTP, &n)).unwrap() {
                Step::Live(ticket) => Some(ticket),
                Step::Replay { .. } => panic!("live"),
            })
            .collect()
    }

    fn answer(
        journal: &Journal,
        tickets: &mut [Option<crate::durable::Ticket>],
        n: u8,
        outside: Outside,
    ) {
        let ticket = tickets[n as usize].take().unwrap();
        journal
            .record(
                ticket,
                &digest(HTTP, &n),
                vec![n],
                format!("{outside:?}"),
                outside,
            )
            .unwrap();
    }

    /// Two requests in flight together: one answers, then the other fails
    /// and the lambda gives up. The failed one is made again (a hole at its
    /// place, or the journal's end); the answered one is kept — whatever
    /// order they took their places in.
    #[test]
    fn giving_up_makes_a_failed_call_again_whatever_order_calls_finished_in() {
        for (first, then) in [(1u8, 0u8), (0, 1)] {
            let (journal, _) = journal(Vec::new());
            let mut tickets = in_flight(&journal, 2);
            answer(&journal, &mut tickets, first, Outside::Answered);
            answer(&journal, &mut tickets, then, Outside::Failed);
            let write = journal.finish(true);
            let expected = if then == 0 {
                vec![(0, true), (1, false)]
            } else {
                vec![(0, false)]
            };
            assert_eq!(
                (write.from, entries(&write)),
                (0, expected),
                "{first} answered, then {then} failed"
            );
        }
    }

    /// As above, each answer written to the store as it came (a durability
    /// point), and a clock read once the failure was in: the failure
    /// becomes a hole below what was written, and what followed it goes.
    #[tokio::test]
    async fn a_failure_written_before_an_answered_call_is_rewritten_as_a_hole() {
        let (journal, host) = journal(Vec::new());
        live(&journal, CLOCK, 9, Outside::No);
        // Places 1 and 2; the later answers first.
        let mut tickets = in_flight(&journal, 2);
        answer(&journal, &mut tickets, 1, Outside::Answered);
        journal.commit().await.unwrap();
        answer(&journal, &mut tickets, 0, Outside::Failed);
        journal.commit().await.unwrap();
        live(&journal, CLOCK, 4, Outside::No);
        let write = journal.finish(true);
        assert_eq!(
            (write.from, entries(&write)),
            (1, vec![(1, true), (2, false)]),
            "{:?}",
            host.journal_writes()
        );
        assert!(write.entries[0].summary.ends_with("made again"));
        assert_eq!(write.entries[1].answer, [1]);
    }

    /// A journal holding a failure and an answered call made together (an
    /// execution lost before it could give up): the replay that gives up
    /// makes the failure again, and only it.
    #[test]
    fn a_replayed_failure_made_together_with_an_answered_call_is_made_again() {
        let (first, _) = journal(Vec::new());
        let mut tickets = in_flight(&first, 2);
        answer(&first, &mut tickets, 1, Outside::Answered);
        answer(&first, &mut tickets, 0, Outside::Failed);
        let recorded = first.finish(false).entries;

        let (again, _) = journal(recorded);
        let places: Vec<_> = (0..2u8)
            .map(|n| {
                again
                    .reserve(HTTP)
                    .unwrap()
                    .resolve(&digest(HTTP, &n))
                    .unwrap()
            })
            .collect();
        for (n, step) in places.into_iter().enumerate() {
            let Step::Replay { seq, .. } = step else {
                panic!("replayed")
            };
            let outside = if n == 0 {
                Outside::Failed
            } else {
                Outside::Answered
            };
            again.replayed_outside(seq, outside);
        }
        let write = again.finish(true);
        assert_eq!(
            (write.from, entries(&write)),
            (0, vec![(0, true), (1, false)])
        );
    }
}
