//! Fairness between keys: within a lambda, ready tasks of different keys
//! take turns, so one key's backlog does not delay another key's first
//! task. A key's share is its weight (1 unless the lambda names it) over
//! the weights of every key with tasks waiting; tasks without a key take
//! turns as one key.
//!
//! Two parts make it hold, whatever the number of processes: the store
//! keeps at most a lookahead of a key's tasks (times its weight) waiting
//! in the queue and parks the rest, so a backlog never fills a queue ahead
//! of other keys; and the embedded mode's queue hands its messages out in
//! weighted turns between keys.
//!
//! The lookahead is what another key's task waits behind: the backlog's
//! tasks in the queue, and the store's writes that move them (each poll,
//! claim and result carries about a share of them), which every task's
//! own writes queue behind. So a smaller lookahead brings another key's
//! first task sooner, and a lone key's backlog moves in smaller batches,
//! more slowly (docs/benchmarks/keys.md measures both).

use std::collections::BTreeMap;

/// A lambda's fairness between keys: the weights of the keys it names, and
/// its lookahead.
///
/// ```
/// let mut fair = waft_core::KeyFairness::default();
/// let (key, weight) = waft_core::KeyFairness::parse_weight("gold=3").unwrap();
/// fair.weights.insert(key, weight);
/// assert_eq!(fair.weight("gold"), 3);
/// assert_eq!(fair.weight("anyone"), 1);
/// assert_eq!(fair.lookahead("gold"), 3 * waft_core::KeyFairness::DEFAULT_LOOKAHEAD);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyFairness {
    /// Weights of the keys named; every other key weighs 1.
    pub weights: BTreeMap<String, u32>,
    /// Tasks of a key of weight 1 waiting in a queue (or for a slot of a
    /// quota or rate) at once; the store parks the rest until some are
    /// claimed. Within `1..=MAX_LOOKAHEAD`.
    pub lookahead: u32,
}

impl Default for KeyFairness {
    fn default() -> Self {
        Self {
            weights: BTreeMap::new(),
            lookahead: Self::DEFAULT_LOOKAHEAD,
        }
    }
}

impl KeyFairness {
    /// The lookahead unless the lambda sets one: few enough that another
    /// key's task behind a backlog of a million starts within 50 ms at p95
    /// in a busy `waft dev` (33 ms measured), while a lone key's backlog
    /// runs at some nine-tenths of its pace at 200 (docs/benchmarks/keys.md); and a
    /// queue without turns (SQS) holds no more than this of one key ahead
    /// of another key's task.
    pub const DEFAULT_LOOKAHEAD: u32 = 100;
    /// The largest lookahead.
    pub const MAX_LOOKAHEAD: u32 = 10_000;
    /// The heaviest weight.
    pub const MAX_WEIGHT: u32 = 100;
    /// The most keys a lambda may name.
    pub const MAX_WEIGHTS: usize = 1000;

    /// The weight of `key`.
    pub fn weight(&self, key: &str) -> u32 {
        self.weights.get(key).copied().unwrap_or(1)
    }

    /// How many of `key`'s tasks may wait in a queue at once.
    pub fn lookahead(&self, key: &str) -> u32 {
        self.lookahead.saturating_mul(self.weight(key))
    }

    /// Why the weights or the lookahead are out of bounds, if they are.
    pub fn check(&self) -> Result<(), String> {
        if !(1..=Self::MAX_LOOKAHEAD).contains(&self.lookahead) {
            return Err(format!(
                "a lookahead of {} tasks; it is within 1..={}",
                self.lookahead,
                Self::MAX_LOOKAHEAD
            ));
        }
        if self.weights.len() > Self::MAX_WEIGHTS {
            return Err(format!(
                "{} keys are weighed; at most {} may be",
                self.weights.len(),
                Self::MAX_WEIGHTS
            ));
        }
        for (key, weight) in &self.weights {
            crate::task::check_key(key)?;
            if !(1..=Self::MAX_WEIGHT).contains(weight) {
                return Err(format!(
                    "key {key:?} weighs {weight}; a weight is within 1..={}",
                    Self::MAX_WEIGHT
                ));
            }
        }
        Ok(())
    }

    /// Parses `KEY=WEIGHT` (the last `=` splits, so a key may hold one).
    pub fn parse_weight(text: &str) -> Result<(String, u32), String> {
        let usage = "write KEY=WEIGHT, e.g. gold=3";
        let (key, weight) = text
            .rsplit_once('=')
            .ok_or_else(|| format!("{text:?}: {usage}"))?;
        let weight: u32 = weight.trim().parse().map_err(|_| {
            format!("{text:?}: the weight {weight:?} is not a whole number; {usage}")
        })?;
        crate::task::check_key(key).map_err(|e| format!("{text:?}: {e}"))?;
        if !(1..=Self::MAX_WEIGHT).contains(&weight) {
            return Err(format!(
                "{text:?}: a weight is within 1..={}",
                Self::MAX_WEIGHT
            ));
        }
        Ok((key.to_owned(), weight))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_parse_and_bad_ones_are_refused() {
        assert_eq!(
            KeyFairness::parse_weight("a=b=2").unwrap(),
            ("a=b".to_owned(), 2)
        );
        for bad in ["gold", "=3", "gold=0", "gold=101", "gold=x", "gold=-1"] {
            assert!(KeyFairness::parse_weight(bad).is_err(), "{bad}");
        }
        let fair = KeyFairness {
            weights: BTreeMap::from([("gold".to_owned(), 4)]),
            lookahead: 30,
        };
        assert_eq!(fair.lookahead("gold"), 120);
        assert_eq!(fair.lookahead("lead"), 30);
        assert!(fair.check().is_ok());
        let heavy = KeyFairness {
            weights: BTreeMap::from([("gold".to_owned(), 0)]),
            ..KeyFairness::default()
        };
        assert!(heavy.check().is_err());
        for lookahead in [0, KeyFairness::MAX_LOOKAHEAD + 1] {
            let fair = KeyFairness {
                lookahead,
                ..KeyFairness::default()
            };
            assert!(fair.check().is_err(), "{lookahead}");
        }
        let widest = KeyFairness {
            weights: BTreeMap::from([("gold".to_owned(), KeyFairness::MAX_WEIGHT)]),
            lookahead: KeyFairness::MAX_LOOKAHEAD,
        };
        assert!(widest.check().is_ok());
        assert_eq!(widest.lookahead("gold"), 1_000_000);
    }
}
