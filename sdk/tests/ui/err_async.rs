use waft_sdk::{Outcome, Task, lambda};

#[lambda]
async fn handle(_task: Task) -> Outcome {
    Outcome::success()
}

fn main() {}
