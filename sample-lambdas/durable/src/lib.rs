//! `durable`: a lambda that sees the world only through host calls — the
//! clocks, randomness, its configuration, outbound HTTP, children, a
//! heartbeat — and branches on what it sees, for the journal's tests.
//!
//! `{"url": "http://…", "posts": 3, "crash_after": 3, "children": 1,
//! "sleep_ms": 0, "step_ms": 0, "draws": 0, "signals": ["approved"],
//! "signal_ms": 1000}`: reads the wall and monotonic clocks, draws a coin
//! (and `draws` more numbers, each a journal entry) from `wasi:random`,
//! reads `REGION`, sleeps, waits for each of `signals` in turn (at most
//! `signal_ms` each; what came is in the output), POSTs `posts` times to
//! `url`, `step_ms` apart (`waft_sdk::sleep` for the first sleep,
//! `std::thread::sleep` between posts: a long one of either suspends the
//! task) (crashing before post number `crash_after` on the
//! first attempt), gives up (`retriable`) at the end of the first attempt
//! with `give_up`, schedules `children` children of itself (with
//! `{"posts": 0}`; after the posts, or before them with
//! `"children_first": true`; with `"gather": true` it waits for them to
//! end, and their statuses are the output's `gathered`), works with floats (NaNs included), heartbeats
//! (`beats` times first, each with its number in its note, then once more),
//! and answers everything it saw.
//! Replayed from its journal, a later attempt answers the same but for
//! `attempt`.

use std::hint::black_box;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use serde_json::json;
use waft_sdk::{
    Child, Error, Outcome, Task, TaskId, config, heartbeat_with, http, lambda, schedule,
};

#[derive(Deserialize, Default)]
#[serde(default)]
struct Plan {
    url: Option<String>,
    posts: u32,
    crash_after: Option<u32>,
    /// Give up (retriable) at the end of the first attempt.
    give_up: bool,
    children: u32,
    /// Schedule the children before the posts.
    children_first: bool,
    /// Wait for the children to end.
    gather: bool,
    sleep_ms: u64,
    /// Between posts.
    step_ms: u64,
    /// Random numbers drawn beside the coin.
    draws: u32,
    /// Signals waited for, in turn, each for at most `signal_ms`.
    signals: Vec<String>,
    signal_ms: u64,
    /// Heartbeats before the last one.
    beats: u64,
}

#[lambda]
fn durable(task: Task) -> Result<Outcome, Error> {
    let plan: Plan = task.json()?;
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let started = Instant::now();
    let coin = wasip2::random::random::get_random_u64();
    let (seed, _) = wasip2::random::insecure_seed::insecure_seed();
    for _ in 0..plan.draws {
        black_box(wasip2::random::random::get_random_u64());
    }
    let side = if coin.is_multiple_of(2) {
        "heads"
    } else {
        "tails"
    };
    let region = config::get("REGION");
    if plan.sleep_ms > 0 {
        waft_sdk::sleep(Duration::from_millis(plan.sleep_ms));
    }
    let signalled: Vec<Option<String>> = plan
        .signals
        .iter()
        .map(|name| {
            let timeout = Duration::from_millis(plan.signal_ms);
            waft_sdk::wait_signal(name, timeout).map(|p| String::from_utf8_lossy(&p).into_owned())
        })
        .collect();
    let mut ids = Vec::new();
    if plan.children_first {
        ids = schedule_children(plan.children)?;
    }
    let mut answers = Vec::new();
    for n in 0..plan.posts {
        if plan.crash_after == Some(n) && task.attempt() == 1 {
            panic!("crashing after {n} posts, as planned");
        }
        if n > 0 && plan.step_ms > 0 {
            std::thread::sleep(Duration::from_millis(plan.step_ms));
        }
        let url = plan.url.as_deref().ok_or_else(|| Error::fatal("no url"))?;
        let response = http::post(url)
            .json(&json!({"n": n, "side": side, "wall": wall.to_string()}))
            .map_err(|e| Error::fatal(e.to_string()))?
            .send()
            .map_err(|e| Error::retriable(e.to_string()))?;
        answers.push(response.text());
    }
    if !plan.children_first {
        ids = schedule_children(plan.children)?;
    }
    let gathered: Vec<String> = if plan.gather {
        waft_sdk::children::wait_all(&ids)
            .iter()
            .map(|end| format!("{:?}", end.status))
            .collect()
    } else {
        Vec::new()
    };
    let ids: Vec<String> = ids.into_iter().map(|id| id.0).collect();
    for n in 0..plan.beats {
        heartbeat_with(format!("beat {n} of {}", plan.beats))
            .map_err(|lost| Error::retriable(lost.to_string()))?;
    }
    let _ = heartbeat_with("all done");
    if plan.give_up && task.attempt() == 1 {
        return Ok(Outcome::retry("giving up, as planned"));
    }
    Outcome::json(&json!({
        "attempt": task.attempt(),
        "wall": wall.to_string(),
        "elapsed": started.elapsed().as_nanos().to_string(),
        "coin": coin.to_string(),
        "seed": seed.to_string(),
        "side": side,
        "region": region,
        "answers": answers,
        "signals": signalled,
        "children": ids,
        "gathered": gathered,
        "floats": floats(coin),
    }))
}

/// Schedules `count` children of this lambda that post nothing.
fn schedule_children(count: u32) -> Result<Vec<TaskId>, Error> {
    (0..count)
        .map(|n| {
            let child = Child::new("durable").json(&json!({"posts": 0, "n": n}))?;
            schedule(child).map_err(|e| Error::retriable(e.to_string()))
        })
        .collect()
}

/// Float work whose bits depend on the coin, NaNs included: the engine
/// canonicalises every NaN it makes, so the bits are the same on any host.
fn floats(coin: u64) -> Vec<String> {
    let x = black_box((coin >> 11) as f64 / (1u64 << 53) as f64);
    let signalling = black_box(f64::from_bits(0x7ff4_0000_0000_0001));
    let mut sum = 0.0f64;
    for i in 1..1000 {
        sum += (x * i as f64).sqrt() / (i as f64 + x);
    }
    [
        sum,
        signalling + 1.0,
        black_box(0.0f64) / black_box(0.0),
        x.mul_add(3.5, -1.25),
    ]
    .iter()
    .map(|f| format!("{:#018x}", f.to_bits()))
    .collect()
}
