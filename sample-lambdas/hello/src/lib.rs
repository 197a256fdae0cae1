//! `hello`: JSON in, JSON out. `{"name": "Ada"}` → `{"greeting": "Hello, Ada!"}`.

use serde::{Deserialize, Serialize};
use waft_sdk::{Error, Outcome, Task, lambda};

#[derive(Deserialize)]
struct Input {
    name: Option<String>,
}

#[derive(Serialize)]
struct Output {
    greeting: String,
}

#[lambda]
fn hello(task: Task) -> Result<Outcome, Error> {
    let name = if task.payload().is_empty() {
        None
    } else {
        task.json::<Input>()?.name
    };
    let greeting = format!("Hello, {}!", name.as_deref().unwrap_or("world"));
    waft_sdk::info!("greeted on attempt {}", task.attempt());
    Outcome::json(&Output { greeting })
}
