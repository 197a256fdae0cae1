use waft_sdk::{Outcome, Task, lambda};

#[lambda]
fn handle(task: Task) -> Outcome {
    Outcome::success_with(task.payload().to_vec())
}

fn main() {}
