//! `chain`: schedules child tasks. `{"lambda": "hello", "names": ["a", "b"]}`
//! schedules one `hello` task per name and outputs the children's ids.

use serde::Deserialize;
use waft_sdk::{Child, Error, Outcome, ScheduleError, Task, lambda};

#[derive(Deserialize)]
struct Input {
    lambda: String,
    names: Vec<String>,
}

#[lambda]
fn chain(task: Task) -> Result<Outcome, Error> {
    let input: Input = task.json()?;
    let mut children = Vec::with_capacity(input.names.len());
    for name in &input.names {
        let child = Child::new(&input.lambda)
            .json(&serde_json::json!({ "name": name }))?
            .collection(task.collection());
        match waft_sdk::schedule(child) {
            Ok(id) => children.push(id.0),
            Err(ScheduleError::Invalid(why)) => return Err(Error::fatal(why)),
            Err(other) => return Err(Error::retriable(other.to_string())),
        }
    }
    waft_sdk::info!("scheduled {} children", children.len());
    Outcome::json(&serde_json::json!({ "children": children }))
}
