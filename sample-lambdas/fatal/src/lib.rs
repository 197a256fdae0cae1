//! `fatal`: always fails for good, the way a lambda rejects a task it can
//! never complete.

use waft_sdk::{Error, Task, lambda};

#[lambda]
fn fatal(task: Task) -> Result<(), Error> {
    waft_sdk::warn!("rejecting task {}", task.id());
    Err(Error::fatal(format!(
        "cannot process a payload of {} bytes: no such account",
        task.payload().len()
    )))
}
