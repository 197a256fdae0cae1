use waft_sdk::{Error, Task, lambda};

#[lambda]
fn handle(task: Task) -> Result<(), Error> {
    let _: serde_json::Value = task.json()?;
    Ok(())
}

fn main() {}
