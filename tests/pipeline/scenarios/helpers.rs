//! What the scenarios of several areas share: how long a task may take to
//! end, and reading the processes' metrics (checked by the metrics scenario,
//! and counting the tasks a per-key limit held back).

use std::time::Duration;

use crate::support::Cluster;

/// How long a scenario waits for a task to end.
pub(super) const WITHIN: Duration = Duration::from_secs(30);

/// What every process of `cluster` serves at `/metrics`.
pub(super) async fn scrape(cluster: &Cluster) -> Vec<String> {
    let mut texts = Vec::new();
    for name in cluster.processes.keys() {
        texts.push(cluster.metrics(name).await);
    }
    texts
}

/// The value of `series` (a metric's name and labels, as served) in one
/// process's `text`; 0 when absent, as a counter not yet moved is.
pub(super) fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| {
            let rest = line.strip_prefix(series)?.strip_prefix(' ')?;
            rest.split_whitespace().next()?.parse().ok()
        })
        .unwrap_or(0.0)
}

/// `series` summed over every process, as Prometheus would.
pub(super) fn total(texts: &[String], series: &str) -> f64 {
    texts.iter().map(|text| value(text, series)).sum()
}
