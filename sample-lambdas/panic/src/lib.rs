//! `panic`: panics. The instance traps; the host reports a crash, not an
//! outcome, and the panic message is in the task's log.

use waft_sdk::{Outcome, Task, lambda};

#[lambda]
fn panic(task: Task) -> Outcome {
    let values: Vec<u32> = Vec::new();
    let index = task.payload().len() + 3;
    // Deliberately out of bounds.
    Outcome::success_with(values[index].to_le_bytes().to_vec())
}
