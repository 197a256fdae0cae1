//! The room an executor asks for: outstanding `NextWork` polls hold slots
//! until they answer, so a freed slot is asked for once, not twice.

use std::collections::HashMap;

use crate::NextWork;

/// `NextWork` polls out at once, at most.
pub(super) const MAX_POLLS: usize = 4;

/// Room held by outstanding `NextWork` polls, per poll.
#[derive(Default)]
pub(super) struct Reserved {
    polls: HashMap<tokio::task::Id, NextWork>,
}

impl Reserved {
    pub(super) fn add(&mut self, id: tokio::task::Id, poll: NextWork) {
        self.polls.insert(id, poll);
    }

    pub(super) fn remove(&mut self, id: tokio::task::Id) {
        self.polls.remove(&id);
    }

    /// Slots of one lambda held.
    pub(super) fn of(&self, lambda: &str) -> usize {
        self.polls
            .values()
            .flat_map(|poll| &poll.slots)
            .filter(|slot| slot.lambda == lambda)
            .map(|slot| slot.free as usize)
            .sum()
    }

    /// The most tasks the outstanding polls may bring, all lambdas
    /// together, against the executor's `max_tasks`.
    pub(super) fn total(&self) -> usize {
        self.polls
            .values()
            .map(|poll| poll.max_tasks as usize)
            .sum()
    }
}
