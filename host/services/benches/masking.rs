//! How long masking a lambda's secret values in a journal's answers takes,
//! in its worst case and a common one.
//!
//! ```sh
//! cargo bench -p waft-services --bench masking
//! ```
//!
//! A release build of the crate's whole graph takes long on a small
//! machine; the figures in docs/benchmarks.md build only the masking's
//! crates optimized: `cargo bench -p waft-services --bench masking
//! --profile dev --config 'profile.dev.package.waft-services.opt-level=3'`
//! (and the same for `aho-corasick` and `memchr`).
//!
//! The worst case: an answer of 4 MiB of one byte and four values of
//! 64 KiB that match it everywhere but in their last byte (what makes a
//! search value by value quadratic), one of them at the end. The common
//! case: a 4 MiB answer of text with four 32-byte values, each twice. Each
//! figure is the median of several runs, building the masker included.

use std::time::{Duration, Instant};

use waft_services::frontend::masking::Masker;

fn main() {
    let near: Vec<String> = (0..4)
        .map(|i| format!("{}{i}", "a".repeat((64 << 10) - 1)))
        .collect();
    let mut worst = vec![b'a'; 4 << 20];
    worst.extend_from_slice(near[2].as_bytes());
    report(
        "worst case: 4 MiB answer, four 64 KiB values",
        &near,
        &worst,
    );

    let tokens: Vec<String> = (0..4)
        .map(|i| format!("tok_{i}_{}", "x7".repeat(13)))
        .collect();
    let mut text = Vec::with_capacity(4 << 20);
    while text.len() < 4 << 20 {
        text.extend_from_slice(
            b"{\"status\":\"ok\",\"items\":[1,2,3],\"note\":\"nothing to see\"}\n",
        );
        if text.len() % (1 << 20) < 64 {
            text.extend_from_slice(tokens[text.len() % 4].as_bytes());
        }
    }
    report(
        "common case: 4 MiB of JSON, four 32-byte values",
        &tokens,
        &text,
    );
}

fn report(label: &str, values: &[String], answer: &[u8]) {
    let mut runs: Vec<Duration> = (0..7)
        .map(|_| {
            let answer = answer.to_vec();
            let started = Instant::now();
            let masked = Masker::new(values).masked(answer);
            let took = started.elapsed();
            std::hint::black_box(masked);
            took
        })
        .collect();
    runs.sort();
    let median = runs[runs.len() / 2];
    let rate = answer.len() as f64 / median.as_secs_f64() / f64::from(1 << 20);
    println!("{label}: {median:.2?} ({rate:.0} MiB/s)");
}
