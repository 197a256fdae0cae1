//! `sleepy`: works for a while in steps, heartbeating with progress after
//! each. `{"steps": 5, "step_ms": 100}`. Stops as soon as the lease is lost.

use std::time::Duration;

use serde::Deserialize;
use waft_sdk::{Error, Outcome, Task, lambda};

#[derive(Deserialize)]
struct Input {
    #[serde(default = "default_steps")]
    steps: u32,
    #[serde(default = "default_step_ms")]
    step_ms: u64,
}

fn default_steps() -> u32 {
    5
}

fn default_step_ms() -> u64 {
    100
}

#[lambda]
fn sleepy(task: Task) -> Result<Outcome, Error> {
    let input: Input = if task.payload().is_empty() {
        Input {
            steps: default_steps(),
            step_ms: default_step_ms(),
        }
    } else {
        task.json()?
    };
    for step in 1..=input.steps {
        std::thread::sleep(Duration::from_millis(input.step_ms));
        waft_sdk::info!("finished step {step}");
        if let Err(lost) = waft_sdk::heartbeat_with(format!("step {step} of {}", input.steps)) {
            return Err(Error::retriable(lost.to_string()));
        }
    }
    Outcome::json(&serde_json::json!({ "steps": input.steps }))
}
