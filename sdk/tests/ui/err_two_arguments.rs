use waft_sdk::{Outcome, Task, lambda};

#[lambda]
fn handle(task: Task, extra: u32) -> Outcome {
    let _ = (task, extra);
    Outcome::success()
}

fn main() {}
