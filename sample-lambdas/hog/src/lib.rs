//! `hog`: allocates memory and touches every page. Without a payload it never
//! stops (the host's memory limit must stop it); `{"mib": N}` stops after N MiB.

use serde::Deserialize;
use waft_sdk::{Error, Outcome, Task, lambda};

#[derive(Deserialize, Default)]
struct Input {
    mib: Option<usize>,
}

#[lambda]
fn hog(task: Task) -> Result<Outcome, Error> {
    let input: Input = if task.payload().is_empty() {
        Input::default()
    } else {
        task.json()?
    };
    let limit = input.mib.unwrap_or(usize::MAX);
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    while chunks.len() < limit {
        chunks.push(std::hint::black_box(vec![0xA5; 1 << 20]));
    }
    Outcome::json(&serde_json::json!({ "allocated_mib": chunks.len() }))
}
