use waft_sdk::{Task, lambda};

#[lambda]
fn handle(_task: Task) -> String {
    "done".to_string()
}

fn main() {}
