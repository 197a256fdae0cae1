use waft_sdk::{Outcome, lambda};

#[lambda]
fn handle(payload: Vec<u8>) -> Outcome {
    Outcome::success_with(payload)
}

fn main() {}
