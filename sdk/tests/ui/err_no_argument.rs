use waft_sdk::{Outcome, lambda};

#[lambda]
fn handle() -> Outcome {
    Outcome::success()
}

fn main() {}
