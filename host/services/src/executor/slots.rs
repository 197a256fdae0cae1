//! The room an executor asks for: outstanding `NextWork` polls hold slots
//! until they answer, so a freed slot is asked for once, not twice.
//!
//! A new poll goes out only for a lambda with room that no outstanding poll
//! names (one just deployed, one whose poll answered, one that was at its
//! concurrency and has a task ended): a lambda already named gets its work
//! from the poll that names it, which answers as soon as work comes and is
//! then asked again with all the room there is. Polls that only added room
//! to lambdas already named would stay out until their wait ended, fill the
//! bound, and leave the next deploy's lambda unasked for until one did.
//!
//! The sums are kept as polls come and go: with a thousand lambdas
//! deployed, each ask reads one count per lambda instead of every slot of
//! every outstanding poll.

use std::collections::HashMap;

use crate::NextWork;

/// `NextWork` polls out at once, at most: a bound that the rule above
/// keeps far away (about one poll, and one more per lambda deployed or
/// freed within a `NextWork` wait).
pub(super) const MAX_POLLS: usize = 16;

/// Room held by outstanding `NextWork` polls, per poll.
#[derive(Default)]
pub(super) struct Reserved {
    polls: HashMap<tokio::task::Id, NextWork>,
    /// Slots held per lambda, all polls together.
    by_lambda: HashMap<String, usize>,
    /// The polls' `max_tasks`, summed.
    total: usize,
}

impl Reserved {
    pub(super) fn add(&mut self, id: tokio::task::Id, poll: NextWork) {
        for slot in &poll.slots {
            *self.by_lambda.entry(slot.lambda.clone()).or_default() += slot.free as usize;
        }
        self.total += poll.max_tasks as usize;
        if let Some(replaced) = self.polls.insert(id, poll) {
            self.release(&replaced);
        }
    }

    pub(super) fn remove(&mut self, id: tokio::task::Id) {
        if let Some(poll) = self.polls.remove(&id) {
            self.release(&poll);
        }
    }

    fn release(&mut self, poll: &NextWork) {
        for slot in &poll.slots {
            if let Some(held) = self.by_lambda.get_mut(&slot.lambda) {
                *held = held.saturating_sub(slot.free as usize);
                if *held == 0 {
                    self.by_lambda.remove(&slot.lambda);
                }
            }
        }
        self.total = self.total.saturating_sub(poll.max_tasks as usize);
    }

    /// Slots of one lambda held.
    pub(super) fn of(&self, lambda: &str) -> usize {
        self.by_lambda.get(lambda).copied().unwrap_or(0)
    }

    /// Whether some slot of `slots` is of a lambda no outstanding poll
    /// names: what a new poll must ask for.
    pub(super) fn names_news(&self, slots: &[crate::LambdaSlots]) -> bool {
        slots.iter().any(|slot| self.of(&slot.lambda) == 0)
    }

    /// The most tasks the outstanding polls may bring, all lambdas
    /// together, against the executor's `max_tasks`.
    pub(super) fn total(&self) -> usize {
        self.total
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::LambdaSlots;

    fn poll(slots: &[(&str, u32)], max_tasks: u32) -> NextWork {
        NextWork {
            slots: slots
                .iter()
                .map(|(lambda, free)| LambdaSlots {
                    lambda: (*lambda).to_owned(),
                    free: *free,
                })
                .collect(),
            max_tasks,
            wait: Duration::from_secs(1),
        }
    }

    #[tokio::test]
    async fn held_slots_follow_the_polls_out() {
        let first = tokio::spawn(async {}).id();
        let second = tokio::spawn(async {}).id();
        let mut reserved = Reserved::default();
        reserved.add(first, poll(&[("a", 3), ("b", 1)], 4));
        reserved.add(second, poll(&[("a", 2)], 2));
        assert_eq!(
            (reserved.of("a"), reserved.of("b"), reserved.total()),
            (5, 1, 6)
        );
        reserved.remove(first);
        assert_eq!(
            (reserved.of("a"), reserved.of("b"), reserved.total()),
            (2, 0, 2)
        );
        // An unknown or repeated removal changes nothing.
        reserved.remove(first);
        assert_eq!((reserved.of("a"), reserved.total()), (2, 2));
        reserved.remove(second);
        assert_eq!((reserved.of("a"), reserved.total()), (0, 0));
        assert!(reserved.by_lambda.is_empty());
    }

    #[tokio::test]
    async fn only_a_lambda_no_poll_names_is_news() {
        let first = tokio::spawn(async {}).id();
        let mut reserved = Reserved::default();
        reserved.add(first, poll(&[("a", 3)], 4));
        // More room for `a`: its poll brings its work.
        assert!(!reserved.names_news(&poll(&[("a", 1)], 1).slots));
        // `b` was just deployed: nobody asks for it yet.
        assert!(reserved.names_news(&poll(&[("a", 1), ("b", 4)], 4).slots));
        reserved.remove(first);
        assert!(reserved.names_news(&poll(&[("a", 1)], 1).slots));
    }
}
