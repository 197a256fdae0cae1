//! The task history's queries: which step a range is read at, and what is
//! refused.

use std::collections::BTreeMap;
use std::time::Duration;

use waft_store::{HistoryMinute, Millis};

use crate::{HistoryQuery, ServiceError, ServiceResult};

const MINUTE: Duration = Duration::from_secs(60);
/// The longest range read at once.
pub(super) const MAX_RANGE: Duration = Duration::from_secs(31 * 24 * 3600);
/// The most points an answer holds.
pub(super) const MAX_POINTS: u64 = 2000;
/// The steps a range is read at when the query names none, in minutes: the
/// first that gives at most 120 points.
const STEPS: &[u64] = &[1, 5, 10, 15, 30, 60, 120, 180, 360, 720, 1440];

/// The step `query` is read at, or why it cannot be.
pub(super) fn step(query: &HistoryQuery) -> ServiceResult<Duration> {
    let invalid = |why: String| Err(ServiceError::InvalidArgument(why));
    let range = query.range;
    if range < MINUTE || range > MAX_RANGE || !range.as_millis().is_multiple_of(MINUTE.as_millis())
    {
        return invalid(format!(
            "range of {} s: a history's range is a whole number of minutes from 1 minute to 31 days",
            range.as_secs_f64()
        ));
    }
    let minutes = range.as_secs() / 60;
    let step = match query.step {
        Some(step) => step,
        None => {
            let step = STEPS
                .iter()
                .copied()
                .find(|s| minutes.div_ceil(*s) <= 120)
                .unwrap_or(1440);
            Duration::from_secs(step * 60)
        }
    };
    if step < MINUTE || !step.as_millis().is_multiple_of(MINUTE.as_millis()) || step > range {
        return invalid(format!(
            "step of {} s: a history's step is a whole number of minutes, at most its range",
            step.as_secs_f64()
        ));
    }
    if minutes.div_ceil(step.as_secs() / 60) > MAX_POINTS {
        return invalid(format!(
            "a range of {minutes} minutes at this step is more than {MAX_POINTS} points: take a longer step"
        ));
    }
    Ok(step)
}

/// A duration in milliseconds, as the store counts time.
pub(super) fn millis(duration: Duration) -> Millis {
    i64::try_from(duration.as_millis()).unwrap_or(Millis::MAX)
}

/// The minutes of several lambdas, each minute's added together.
pub(super) fn add_lambdas(minutes: Vec<HistoryMinute>) -> Vec<HistoryMinute> {
    let mut added: BTreeMap<Millis, HistoryMinute> = BTreeMap::new();
    for minute in minutes {
        match added.get_mut(&minute.minute) {
            None => {
                added.insert(minute.minute, minute);
            }
            Some(kept) => {
                kept.succeeded += minute.succeeded;
                kept.failed += minute.failed;
                kept.dead += minute.dead;
                kept.depth = match (kept.depth, minute.depth) {
                    (Some(a), Some(b)) => Some(a + b),
                    (a, b) => a.or(b),
                };
                kept.latency.merge(&minute.latency);
            }
        }
    }
    added.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(range_s: u64, step_s: Option<u64>) -> HistoryQuery {
        HistoryQuery {
            lambda: None,
            range: Duration::from_secs(range_s),
            step: step_s.map(Duration::from_secs),
        }
    }

    #[test]
    fn ranges_get_steps_of_at_most_120_points() {
        let step = |range, given| step(&query(range, given)).unwrap().as_secs();
        assert_eq!(step(3600, None), 60);
        assert_eq!(step(24 * 3600, None), 15 * 60);
        assert_eq!(step(7 * 24 * 3600, None), 120 * 60);
        assert_eq!(step(3600, Some(300)), 300);
    }

    #[test]
    fn bad_ranges_and_steps_are_refused_with_the_reason() {
        for (range, given, words) in [
            (0, None, "range of 0 s"),
            (90, None, "whole number of minutes"),
            (40 * 24 * 3600, None, "31 days"),
            (3600, Some(30), "step of 30 s"),
            (3600, Some(7200), "at most its range"),
            (31 * 24 * 3600, Some(60), "more than 2000 points"),
        ] {
            match step(&query(range, given)) {
                Err(ServiceError::InvalidArgument(why)) => assert!(why.contains(words), "{why}"),
                other => panic!("{range} {given:?}: {other:?}"),
            }
        }
    }
}
