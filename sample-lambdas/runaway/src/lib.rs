//! `runaway`: a CPU loop. Without a payload it never ends (the host's fuel or
//! deadline must stop it); `{"iterations": N}` ends after N rounds.

use serde::Deserialize;
use waft_sdk::{Error, Outcome, Task, lambda};

#[derive(Deserialize, Default)]
struct Input {
    iterations: Option<u64>,
}

#[lambda]
fn runaway(task: Task) -> Result<Outcome, Error> {
    let input: Input = if task.payload().is_empty() {
        Input::default()
    } else {
        task.json()?
    };
    let limit = input.iterations.unwrap_or(u64::MAX);
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut i = 0;
    while i < limit {
        // xorshift, kept opaque so the loop is not optimised away.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state = std::hint::black_box(state);
        i += 1;
    }
    Outcome::json(&serde_json::json!({ "state": state }))
}
