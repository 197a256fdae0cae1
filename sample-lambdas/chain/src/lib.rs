//! `chain`: schedules child tasks, and may wait for them (a fan-in).
//!
//! `{"lambda": "hello", "names": ["a", "b"]}` schedules one `hello` task per
//! name; `{"children": [{"lambda": "fatal", "payload": {...}}, ...]}` one
//! task per entry. A `"key"` beside the names, or in an entry, is the
//! children's key. The output is the children's ids, `{"children": [...]}`;
//! with `"wait": true` the task then waits for them all to end
//! (`children::wait_all`), and the output also holds each one's end,
//! `"ends": [{"id", "status", "output", "error"}]` (the output as text).
//! With `"fail": true` it then fails instead (retriable); with
//! `"tag_attempt": true` each entry's payload (an object) also holds the
//! attempt, so a later attempt asks for other children than its journal
//! holds: a divergence.

use serde::Deserialize;
use waft_sdk::{Child, Error, Outcome, ScheduleError, Task, children, lambda};

#[derive(Deserialize)]
struct Input {
    #[serde(default)]
    lambda: String,
    #[serde(default)]
    names: Vec<String>,
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    children: Vec<Spec>,
    #[serde(default)]
    wait: bool,
    #[serde(default)]
    fail: bool,
    #[serde(default)]
    tag_attempt: bool,
}

#[derive(Deserialize)]
struct Spec {
    lambda: String,
    #[serde(default)]
    payload: serde_json::Value,
    #[serde(default)]
    key: Option<String>,
}

#[lambda]
fn chain(task: Task) -> Result<Outcome, Error> {
    let input: Input = task.json()?;
    let named = input.names.iter().map(|name| Spec {
        lambda: input.lambda.clone(),
        payload: serde_json::json!({ "name": name }),
        key: input.key.clone(),
    });
    let mut ids = Vec::with_capacity(input.names.len() + input.children.len());
    for mut spec in named.chain(input.children) {
        if input.tag_attempt
            && let Some(payload) = spec.payload.as_object_mut()
        {
            payload.insert("attempt".into(), task.attempt().into());
        }
        let mut child = Child::new(&spec.lambda)
            .json(&spec.payload)?
            .collection(task.collection());
        if let Some(key) = spec.key {
            child = child.key(key);
        }
        match waft_sdk::schedule(child) {
            Ok(id) => ids.push(id),
            Err(ScheduleError::Invalid(why)) => return Err(Error::fatal(why)),
            Err(other) => return Err(Error::retriable(other.to_string())),
        }
    }
    waft_sdk::info!("scheduled {} children", ids.len());
    let names: Vec<&str> = ids.iter().map(|id| id.0.as_str()).collect();
    if input.fail && !input.wait {
        return Err(Error::retriable("failing, as asked"));
    }
    if !input.wait {
        return Outcome::json(&serde_json::json!({ "children": names }));
    }
    let ends: Vec<_> = children::wait_all(&ids)
        .into_iter()
        .map(|end| {
            serde_json::json!({
                "id": end.id.0,
                "status": format!("{:?}", end.status),
                "output": end.output.map(|o| String::from_utf8_lossy(&o).into_owned()),
                "error": end.error,
            })
        })
        .collect();
    if input.fail {
        return Err(Error::retriable(format!("failing, as asked: {ends:?}")));
    }
    Outcome::json(&serde_json::json!({ "children": names, "ends": ends }))
}
