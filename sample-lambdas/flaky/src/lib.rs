//! `flaky`: fails with a retriable error until attempt N (default 3), then
//! succeeds. `{"succeed_on": 3, "retry_after_ms": 10, "note": "…"}`; the
//! note, any string (NUL included), goes into its log and its error.

use std::time::Duration;

use serde::Deserialize;
use waft_sdk::{Error, Outcome, Task, lambda};

#[derive(Deserialize, Default)]
struct Input {
    succeed_on: Option<u32>,
    retry_after_ms: Option<u64>,
    note: Option<String>,
}

#[lambda]
fn flaky(task: Task) -> Result<Outcome, Error> {
    let input: Input = if task.payload().is_empty() {
        Input::default()
    } else {
        task.json()?
    };
    let succeed_on = input.succeed_on.unwrap_or(3);
    let note = input.note.unwrap_or_default();
    waft_sdk::info!(
        "attempt {}, succeeding on {succeed_on}{note}",
        task.attempt()
    );
    if task.attempt() < succeed_on {
        let message = format!("attempt {} of {succeed_on}: not yet{note}", task.attempt());
        return Ok(match input.retry_after_ms {
            Some(ms) => Outcome::retry_after(message, Duration::from_millis(ms)),
            None => Outcome::retry(message),
        });
    }
    Outcome::json(&serde_json::json!({ "succeeded_on": task.attempt() }))
}
