//! The lambda versions an executor keeps loaded: at most a bounded number,
//! the least recently used forgotten first.
//!
//! A loaded version holds its compiled code (tens of megabytes for a Python
//! or JavaScript lambda), and an executor that runs for months sees every
//! version ever deployed: without a bound the map only grows. Forgetting a
//! version only drops the map's reference: executions running it keep
//! theirs, and its next task loads it again (from its artifact, in
//! milliseconds).
//!
//! A version is kept by its lambda's name and number. The store never gives
//! a number twice under one name, not even to a lambda deployed after the
//! name's lambda was deleted, so a kept version cannot be taken for another
//! lambda's (its code, grants or limits); and a deleted lambda's versions are
//! forgotten as soon as the executor's list no longer has it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OnceCell;

use crate::lock;

/// A lambda's name and version.
type Key = (String, u32);

/// Cells of loaded versions; a failed load leaves its cell empty, so it is
/// retried by the next task.
pub(super) struct Versions<T> {
    capacity: usize,
    inner: Mutex<Inner<T>>,
}

struct Inner<T> {
    cells: HashMap<Key, (Arc<OnceCell<T>>, u64)>,
    /// Counts uses: a cell's stamp is when it was last asked for.
    uses: u64,
}

impl<T> Versions<T> {
    /// At most `capacity` versions (at least one).
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            inner: Mutex::new(Inner {
                cells: HashMap::new(),
                uses: 0,
            }),
        }
    }

    /// The cell of `name` at `version`, new and empty if it was not kept;
    /// the least recently used cell beyond the capacity is forgotten.
    pub(super) fn cell(&self, name: &str, version: u32) -> Arc<OnceCell<T>> {
        let mut inner = lock(&self.inner);
        inner.uses += 1;
        let stamp = inner.uses;
        let key = (name.to_owned(), version);
        if let Some((cell, used)) = inner.cells.get_mut(&key) {
            *used = stamp;
            return cell.clone();
        }
        if inner.cells.len() >= self.capacity {
            let oldest = inner
                .cells
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(key, _)| key.clone());
            if let Some(oldest) = oldest {
                inner.cells.remove(&oldest);
            }
        }
        let cell = Arc::new(OnceCell::new());
        inner.cells.insert(key, (cell.clone(), stamp));
        cell
    }

    /// Forgets every version of the lambdas `listed` says no to (deleted
    /// ones).
    pub(super) fn keep_only(&self, listed: impl Fn(&str) -> bool) {
        lock(&self.inner).cells.retain(|(name, _), _| listed(name));
    }

    /// Whether `name` at `version` is kept (loaded or loading).
    pub(super) fn contains(&self, name: &str, version: u32) -> bool {
        lock(&self.inner)
            .cells
            .contains_key(&(name.to_owned(), version))
    }

    /// How many versions are kept.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        lock(&self.inner).cells.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_keeps_more_than_its_capacity() {
        let versions = Versions::<u32>::new(3);
        for version in 0..100 {
            let cell = versions.cell("hello", version);
            assert!(cell.set(version).is_ok());
            assert!(versions.len() <= 3, "{} kept", versions.len());
        }
        assert!(versions.contains("hello", 99));
        assert!(!versions.contains("hello", 0));
    }

    #[test]
    fn forgets_the_least_recently_used() {
        let versions = Versions::<u32>::new(2);
        let one = versions.cell("a", 1);
        one.set(1).unwrap();
        versions.cell("b", 1);
        // `a` is used again: `b` is now the oldest.
        assert_eq!(versions.cell("a", 1).get(), Some(&1));
        versions.cell("c", 1);
        assert!(versions.contains("a", 1));
        assert!(!versions.contains("b", 1));
        assert!(versions.contains("c", 1));
    }

    #[test]
    fn a_lambda_no_longer_listed_is_forgotten() {
        let versions = Versions::<u32>::new(8);
        versions.cell("gone", 1).set(1).unwrap();
        versions.cell("gone", 2).set(2).unwrap();
        versions.cell("kept", 1).set(1).unwrap();
        versions.keep_only(|name| name == "kept");
        assert!(!versions.contains("gone", 1) && !versions.contains("gone", 2));
        assert!(versions.contains("kept", 1));
        assert_eq!(versions.cell("gone", 1).get(), None, "loaded afresh");
    }

    #[test]
    fn a_kept_cell_is_the_same_cell() {
        let versions = Versions::<u32>::new(4);
        versions.cell("a", 7).set(7).unwrap();
        assert_eq!(versions.cell("a", 7).get(), Some(&7));
        assert_eq!(versions.len(), 1);
    }
}
