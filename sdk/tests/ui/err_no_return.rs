use waft_sdk::{Task, lambda};

#[lambda]
fn handle(_task: Task) {}

fn main() {}
