//! Task history: per lambda and minute, how many executions ended and how,
//! how long tasks waited from their scheduled time to their start, and how
//! many waited to start: what the dashboard's charts draw.
//!
//! Ended tasks are pruned (a lambda may keep its successes a second), so
//! history cannot be read from the tasks table: the HSC counts what it sees
//! in memory, per `<lambda, minute>`, and adds its counts to the store's
//! minutes every few seconds ([`MinuteCounts`], an additive upsert, so
//! several HSCs add to one row). The latency of a minute is a
//! [`LatencyHistogram`] with fixed log-scale buckets: two histograms merge by
//! adding their buckets, so percentiles over several lambdas and minutes
//! are computed from the merged buckets, never averaged.

use std::collections::BTreeMap;

use super::Millis;

/// One minute, in milliseconds.
pub const MINUTE: Millis = 60_000;

/// Buckets of a [`LatencyHistogram`]: bucket 0 holds latencies under 1 ms,
/// bucket `i` those in `[2^(i-1), 2^i)` ms, and the last everything from
/// `2^(BUCKETS-2)` ms (about 12 days) up.
pub const BUCKETS: usize = 32;

/// The start of the minute holding `at`.
pub fn minute_of(at: Millis) -> Millis {
    at.div_euclid(MINUTE) * MINUTE
}

/// A histogram of latencies with [`BUCKETS`] power-of-two buckets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatencyHistogram {
    counts: [u64; BUCKETS],
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self {
            counts: [0; BUCKETS],
        }
    }
}

impl LatencyHistogram {
    /// The bucket a latency of `ms` falls in (a negative one, from a clock
    /// that stepped back, in the first).
    pub fn bucket_of(ms: Millis) -> usize {
        if ms < 1 {
            return 0;
        }
        let bits = 64 - ms.leading_zeros() as usize;
        bits.min(BUCKETS - 1)
    }

    /// The range `[low, high)` of a bucket, in milliseconds.
    pub fn bounds(bucket: usize) -> (f64, f64) {
        match bucket {
            0 => (0.0, 1.0),
            b => (2f64.powi(b as i32 - 1), 2f64.powi(b as i32)),
        }
    }

    /// Counts one latency.
    pub fn record(&mut self, ms: Millis) {
        self.counts[Self::bucket_of(ms)] += 1;
    }

    /// Adds `n` latencies to bucket `bucket`; a bucket past the last is
    /// counted in the last.
    pub fn add(&mut self, bucket: usize, n: u64) {
        self.counts[bucket.min(BUCKETS - 1)] += n;
    }

    /// Adds another histogram's counts to this one.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts.iter()) {
            *mine += theirs;
        }
    }

    /// How many latencies it holds.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The buckets that hold any latency: `(bucket, count)`.
    pub fn nonzero(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(b, n)| (b, *n))
    }

    /// The `q` quantile (0 to 1) in milliseconds, interpolated within its
    /// bucket (so within a factor of two of the truth); `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.total();
        if total == 0 {
            return None;
        }
        let rank = (q.clamp(0.0, 1.0) * total as f64).max(1.0);
        let mut below = 0u64;
        for (bucket, &n) in self.counts.iter().enumerate() {
            if n == 0 {
                continue;
            }
            if (below + n) as f64 >= rank {
                let (low, high) = Self::bounds(bucket);
                let within = (rank - below as f64) / n as f64;
                return Some(low + (high - low) * within);
            }
            below += n;
        }
        Some(Self::bounds(BUCKETS - 1).1)
    }
}

/// What the HSCs counted of one lambda in one minute, to add to the
/// store's row of that minute.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MinuteCounts {
    pub lambda: String,
    /// The minute's start ([`minute_of`]).
    pub minute: Millis,
    /// Executions that succeeded.
    pub succeeded: u64,
    /// Executions that failed, retriably or for good.
    pub failed: u64,
    /// Of the failed, those whose task is now dead (out of attempts).
    pub dead: u64,
    /// From each started task's scheduled time to its claim (first
    /// executions only: a retry waits for its backoff, not for the queue).
    pub latency: LatencyHistogram,
}

impl MinuteCounts {
    /// Adds another count of the same lambda and minute.
    pub fn merge(&mut self, other: &MinuteCounts) {
        self.succeeded += other.succeeded;
        self.failed += other.failed;
        self.dead += other.dead;
        self.latency.merge(&other.latency);
    }

    /// Whether it counts nothing.
    pub fn is_empty(&self) -> bool {
        self.succeeded == 0 && self.failed == 0 && self.dead == 0 && self.latency.total() == 0
    }
}

/// Per lambda, how many tasks waited to start at one minute: the queue
/// depth sampler's reading.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DepthSample {
    pub lambda: String,
    pub minute: Millis,
    /// Due and waiting to start (new, retrying or in a queue; not held).
    pub depth: u64,
}

/// The store's minutes to add to ([`MinuteCounts`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HistoryAdd {
    pub minutes: Vec<MinuteCounts>,
}

/// Sets the depth of lambdas at a minute; one sampler at a time.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HistoryDepth {
    pub samples: Vec<DepthSample>,
}

/// Reads the minutes `[from, to)` of one lambda, or of all added together.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HistoryRead {
    pub lambda: Option<String>,
    pub from: Millis,
    pub to: Millis,
}

/// One minute as the store keeps it (of one lambda, or of all added
/// together).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HistoryMinute {
    pub minute: Millis,
    pub succeeded: u64,
    pub failed: u64,
    pub dead: u64,
    /// The sampled queue depth; `None` when no sample was taken.
    pub depth: Option<u64>,
    pub latency: LatencyHistogram,
}

/// Deletes the minutes before `before`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HistoryPrune {
    pub before: Millis,
}

/// One point of a chart: the minutes of one step added together.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HistoryPoint {
    /// The step's start.
    pub at: Millis,
    pub succeeded: u64,
    pub failed: u64,
    pub dead: u64,
    /// Latency percentiles, in milliseconds; `None` when nothing started.
    pub latency_p50: Option<f64>,
    pub latency_p95: Option<f64>,
    pub latency_p99: Option<f64>,
    /// The deepest sampled queue in the step; `None` when none was sampled.
    pub depth: Option<u64>,
}

/// The points `[from, to)` at `step` (a whole number of minutes; `from` is
/// rounded down to a step) from the store's minutes: every step has a
/// point, zero where nothing was counted.
pub fn history_points(
    minutes: &[HistoryMinute],
    from: Millis,
    to: Millis,
    step: Millis,
) -> Vec<HistoryPoint> {
    let step = step.max(MINUTE) / MINUTE * MINUTE;
    let start = from.div_euclid(step) * step;
    let mut steps: BTreeMap<Millis, (HistoryPoint, LatencyHistogram)> = BTreeMap::new();
    let mut at = start;
    while at < to {
        let point = HistoryPoint {
            at,
            ..HistoryPoint::default()
        };
        steps.insert(at, (point, LatencyHistogram::default()));
        at += step;
    }
    for minute in minutes {
        let key = minute.minute.div_euclid(step) * step;
        let Some((point, latency)) = steps.get_mut(&key) else {
            continue;
        };
        point.succeeded += minute.succeeded;
        point.failed += minute.failed;
        point.dead += minute.dead;
        if let Some(depth) = minute.depth {
            point.depth = Some(point.depth.map_or(depth, |d| d.max(depth)));
        }
        latency.merge(&minute.latency);
    }
    steps
        .into_values()
        .map(|(mut point, latency)| {
            point.latency_p50 = latency.quantile(0.50);
            point.latency_p95 = latency.quantile(0.95);
            point.latency_p99 = latency.quantile(0.99);
            point
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_fall_in_power_of_two_buckets() {
        assert_eq!(LatencyHistogram::bucket_of(-5), 0);
        assert_eq!(LatencyHistogram::bucket_of(0), 0);
        assert_eq!(LatencyHistogram::bucket_of(1), 1);
        assert_eq!(LatencyHistogram::bucket_of(2), 2);
        assert_eq!(LatencyHistogram::bucket_of(3), 2);
        assert_eq!(LatencyHistogram::bucket_of(4), 3);
        assert_eq!(LatencyHistogram::bucket_of(1023), 10);
        assert_eq!(LatencyHistogram::bucket_of(1024), 11);
        assert_eq!(LatencyHistogram::bucket_of(i64::MAX), BUCKETS - 1);
        for ms in [1, 7, 100, 5_000, 86_400_000] {
            let (low, high) = LatencyHistogram::bounds(LatencyHistogram::bucket_of(ms));
            assert!(
                low <= ms as f64 && (ms as f64) < high,
                "{ms} in [{low}, {high})"
            );
        }
    }

    #[test]
    fn quantiles_stay_within_their_bucket() {
        let mut h = LatencyHistogram::default();
        assert_eq!(h.quantile(0.5), None);
        for ms in 1..=100 {
            h.record(ms);
        }
        let p50 = h.quantile(0.5).unwrap();
        assert!((32.0..64.0).contains(&p50), "p50 {p50}");
        let p99 = h.quantile(0.99).unwrap();
        assert!((64.0..=128.0).contains(&p99), "p99 {p99}");
        assert!(h.quantile(0.0).unwrap() >= 1.0);
        let mut one = LatencyHistogram::default();
        one.record(0);
        assert!(one.quantile(0.99).unwrap() <= 1.0);
    }

    /// Merging adds buckets, so the quantile of a merge is the quantile of
    /// all latencies together: a quiet fast lambda does not hide a busy
    /// slow one, as an average of percentiles would.
    #[test]
    fn merged_histograms_answer_for_all_their_latencies() {
        let mut fast = LatencyHistogram::default();
        let mut slow = LatencyHistogram::default();
        let mut all = LatencyHistogram::default();
        for _ in 0..10 {
            fast.record(2);
            all.record(2);
        }
        for _ in 0..990 {
            slow.record(3000);
            all.record(3000);
        }
        let mut merged = fast.clone();
        merged.merge(&slow);
        assert_eq!(merged, all);
        assert_eq!(merged.total(), 1000);
        let p50 = merged.quantile(0.5).unwrap();
        assert!((2048.0..4096.0).contains(&p50), "p50 {p50}");
        assert_eq!(
            merged.nonzero().collect::<Vec<_>>(),
            vec![(2, 10), (12, 990)]
        );
        let mut added = LatencyHistogram::default();
        added.add(2, 10);
        added.add(99, 1);
        assert_eq!(added.nonzero().collect::<Vec<_>>(), vec![(2, 10), (31, 1)]);
    }

    #[test]
    fn minutes_are_whole() {
        assert_eq!(minute_of(0), 0);
        assert_eq!(minute_of(59_999), 0);
        assert_eq!(minute_of(60_000), 60_000);
        assert_eq!(minute_of(-1), -60_000);
    }

    fn minute(at: Millis, succeeded: u64, depth: Option<u64>, latency: &[Millis]) -> HistoryMinute {
        let mut histogram = LatencyHistogram::default();
        for ms in latency {
            histogram.record(*ms);
        }
        HistoryMinute {
            minute: at,
            succeeded,
            failed: 1,
            dead: 0,
            depth,
            latency: histogram,
        }
    }

    #[test]
    fn steps_add_their_minutes_and_every_step_has_a_point() {
        let h = 60 * MINUTE;
        let minutes = [
            minute(h, 3, Some(4), &[10, 10]),
            minute(h + 5 * MINUTE, 2, Some(9), &[1000]),
            minute(h + 20 * MINUTE, 1, None, &[]),
            // Outside the range: left out.
            minute(3 * h, 100, Some(100), &[1]),
        ];
        let points = history_points(&minutes, h + 7_000, 2 * h, 15 * MINUTE);
        assert_eq!(points.len(), 4);
        assert_eq!(points[0].at, h);
        assert_eq!(points[0].succeeded, 5);
        assert_eq!(points[0].failed, 2);
        assert_eq!(points[0].depth, Some(9), "the deepest sample");
        let p50 = points[0].latency_p50.unwrap();
        assert!((8.0..16.0).contains(&p50), "p50 {p50}");
        assert!(points[0].latency_p99.unwrap() >= 512.0);
        assert_eq!(points[1].succeeded, 1);
        assert_eq!(points[1].depth, None);
        assert_eq!(points[1].latency_p50, None);
        assert_eq!(points[3].succeeded, 0);
        let minutely = history_points(&minutes, h, h + 10 * MINUTE, MINUTE);
        assert_eq!(minutely.len(), 10);
        assert_eq!(minutely[5].succeeded, 2);
    }
}
