//! Batches that cross a process, cut by bytes as well as by count.
//!
//! Results, heartbeats and claims travel between Waft's processes many to a
//! call, and the receiver refuses a message over
//! [`MAX_INTERNAL_MESSAGE`](waft_core::limits::MAX_INTERNAL_MESSAGE) whole.
//! Cut by count alone, a batch of large items — fourteen results of 1 MiB
//! finishing together — is refused, and every item in it is lost with it,
//! other tenants' among them. So every batch is also cut by
//! [`MAX_BATCH_BYTES`], each item counted by [`WireSize`], an upper bound
//! of its encoded size. An item larger than a whole batch travels alone, so
//! that it fails alone; the senders see that their items fit (a result's
//! log is cut, an output no batch carries ends its task failed, a claimed
//! task no answer carries is failed by the HSC).
//!
//! One helper for every sender: the executor's results (`executor::
//! reporter`) and heartbeats (`executor::heartbeats`), the Controller's
//! claims and the HSC's answers to them.

use waft_core::limits::{ITEM_OVERHEAD, MAX_BATCH_BYTES};
use waft_store::{ClaimedTask, Heartbeat, ResultOutcome, TaskResult};

/// What an item weighs in a batch: its strings and bytes, plus
/// [`ITEM_OVERHEAD`] for its tags, lengths and numbers.
pub(crate) trait WireSize {
    fn wire_size(&self) -> usize;
}

impl WireSize for TaskResult {
    fn wire_size(&self) -> usize {
        let outcome = match &self.outcome {
            ResultOutcome::Success { output } => output.as_ref().map_or(0, Vec::len),
            ResultOutcome::Retriable { error, .. } | ResultOutcome::Fatal { error } => error.len(),
            ResultOutcome::Suspend { wait, .. } => match wait {
                waft_store::Wait::Timer => 0,
                waft_store::Wait::Signal { name, .. } => name.len(),
                // Each id with its field's framing.
                waft_store::Wait::Children { ids } => ids.iter().map(|id| id.len() + 2).sum(),
            },
        };
        let journal = self.journal.as_ref().map_or(0, |write| {
            write
                .entries
                .iter()
                .map(waft_store::JournalEntry::wire_size)
                .sum()
        });
        ITEM_OVERHEAD + self.id.len() + outcome + self.log.as_ref().map_or(0, String::len) + journal
    }
}

impl WireSize for Heartbeat {
    fn wire_size(&self) -> usize {
        ITEM_OVERHEAD + self.id.len() + self.progress.as_ref().map_or(0, String::len)
    }
}

impl WireSize for ClaimedTask {
    fn wire_size(&self) -> usize {
        ITEM_OVERHEAD
            + self.id.len()
            + self.lambda.len()
            + self.collection.len()
            + self.payload.len()
    }
}

/// How much one batch may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Budget {
    /// Items at most.
    pub(crate) items: usize,
    /// Bytes at most, as [`WireSize`] counts them.
    pub(crate) bytes: usize,
}

impl Budget {
    /// At most `items` items and [`MAX_BATCH_BYTES`].
    pub(crate) const fn items(items: usize) -> Self {
        Self {
            items,
            bytes: MAX_BATCH_BYTES,
        }
    }
}

/// One batch being filled, item by item.
#[derive(Debug)]
pub(crate) struct Filling {
    budget: Budget,
    items: usize,
    bytes: usize,
}

impl Filling {
    pub(crate) fn new(budget: Budget) -> Self {
        Self {
            budget,
            items: 0,
            bytes: 0,
        }
    }

    /// Whether an item of `size` bytes joins this batch, counting it if it
    /// does. The first item always joins, however large: it goes alone.
    pub(crate) fn admit(&mut self, size: usize) -> bool {
        if self.items > 0
            && (self.items >= self.budget.items
                || self.bytes.saturating_add(size) > self.budget.bytes)
        {
            return false;
        }
        self.items += 1;
        self.bytes = self.bytes.saturating_add(size);
        true
    }

    /// Whether no further item can join.
    pub(crate) fn is_full(&self) -> bool {
        self.items >= self.budget.items || self.bytes >= self.budget.bytes
    }
}

/// `items` in order, cut into batches within `budget`, each item weighed by
/// `size`.
pub(crate) fn cut<T>(items: Vec<T>, budget: Budget, size: impl Fn(&T) -> usize) -> Vec<Vec<T>> {
    let mut batches = Vec::new();
    let mut batch = Vec::new();
    let mut filling = Filling::new(budget);
    for item in items {
        let weight = size(&item);
        if !filling.admit(weight) {
            batches.push(std::mem::take(&mut batch));
            filling = Filling::new(budget);
            filling.admit(weight);
        }
        batch.push(item);
    }
    if !batch.is_empty() {
        batches.push(batch);
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_are_cut_by_bytes_and_by_count_in_order() {
        let budget = Budget {
            items: 3,
            bytes: 10,
        };
        let batches = cut(vec![4, 4, 4, 1, 1, 1, 1, 9, 2], budget, |n| *n);
        assert_eq!(
            batches,
            vec![vec![4, 4], vec![4, 1, 1], vec![1, 1], vec![9], vec![2]]
        );
        assert!(cut(Vec::<usize>::new(), budget, |n| *n).is_empty());
    }

    #[test]
    fn an_item_over_the_budget_goes_alone() {
        let budget = Budget {
            items: 100,
            bytes: 10,
        };
        let batches = cut(vec![1, 2, 50, 3, 60, 70, 4], budget, |n| *n);
        assert_eq!(
            batches,
            vec![vec![1, 2], vec![50], vec![3], vec![60], vec![70], vec![4]]
        );
    }

    #[test]
    fn results_of_a_mebibyte_go_fifteen_to_a_batch() {
        let result = |n: usize| TaskResult {
            id: format!("task-{n}"),
            lease_token: 1,
            outcome: ResultOutcome::Success {
                output: Some(vec![0; 1 << 20]),
            },
            log: Some("+0ms info done\n".into()),
            journal: None,
            replayed: 0,
        };
        let results: Vec<_> = (0..14).map(result).collect();
        let batches = cut(results, Budget::items(1000), WireSize::wire_size);
        assert_eq!(batches.iter().map(Vec::len).collect::<Vec<_>>(), [14]);
        let results: Vec<_> = (0..40).map(result).collect();
        let batches = cut(results, Budget::items(1000), WireSize::wire_size);
        assert_eq!(batches.iter().map(Vec::len).sum::<usize>(), 40);
        for batch in &batches {
            let bytes: usize = batch.iter().map(WireSize::wire_size).sum();
            assert!(bytes <= MAX_BATCH_BYTES, "{bytes} bytes in a batch");
        }
        assert_eq!(batches.len(), 3);
    }

    #[test]
    fn filling_admits_the_first_item_whatever_its_size() {
        let mut filling = Filling::new(Budget { items: 2, bytes: 5 });
        assert!(!filling.is_full());
        assert!(filling.admit(7));
        assert!(filling.is_full());
        assert!(!filling.admit(1));
        let mut filling = Filling::new(Budget { items: 2, bytes: 5 });
        assert!(filling.admit(1) && filling.admit(1));
        assert!(filling.is_full() && !filling.admit(0));
    }
}
