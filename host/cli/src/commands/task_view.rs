//! How `waft task` shows tasks: one task as text or JSON (with what it
//! waits for, in words a person can act on), and a task with its children
//! as a tree.

use serde_json::json;
use waft_core::TaskStatus;
use waft_services::ClientApi;
use waft_store::{Task, TaskList};

use crate::commands::client::{json_bytes, show_bytes, time};

/// A task and its children, recursively.
pub(super) struct TaskTree {
    pub(super) task: Task,
    pub(super) children: Vec<TaskTree>,
}

impl TaskTree {
    pub(super) fn print(&self, depth: usize) {
        println!(
            "{:indent$}{}  {}  {}  attempt {}/{}",
            "",
            self.task.id,
            self.task.lambda,
            self.task.status.as_str(),
            self.task.attempt,
            self.task.max_attempts,
            indent = depth * 2
        );
        for child in &self.children {
            child.print(depth + 1);
        }
    }

    pub(super) fn to_json(&self) -> serde_json::Value {
        let mut value = task_json(&self.task);
        value["children"] = self.children.iter().map(TaskTree::to_json).collect();
        value
    }
}

/// Walks the children of `root` breadth-first, a page at a time.
pub(super) async fn descendants(
    frontend: &impl ClientApi,
    root: Task,
) -> Result<TaskTree, waft_services::ServiceError> {
    let mut children = Vec::new();
    let mut after = None;
    loop {
        let page = frontend
            .task_list(TaskList {
                parent_id: Some(root.id.clone()),
                after: after.clone(),
                limit: 1000,
                ..TaskList::default()
            })
            .await?;
        let full = page.len() == 1000;
        after = page.last().map(|t| t.id.clone());
        for child in page {
            children.push(Box::pin(descendants(frontend, child)).await?);
        }
        if !full {
            return Ok(TaskTree {
                task: root,
                children,
            });
        }
    }
}

/// What a waiting task waits for besides its time: a limit of its key, a
/// gate, a slot of a quota or rate, its debounce window, a signal or its
/// children; `None` for a sleep, and for a task that waits for nothing.
pub(super) fn waiting_for(task: &Task) -> Option<String> {
    if task.parked && task.awaits_turn {
        let key = task.key.as_deref().unwrap_or_default();
        return Some(format!(
            "key {key:?}'s turn (the lambda is fair between keys, and as many of the key's \
             tasks wait in the queue as its lookahead and weight allow)"
        ));
    }
    if task.parked {
        let key = task.key.as_deref().unwrap_or_default();
        return Some(format!(
            "a free place for key {key:?} (the lambda's concurrency per key)"
        ));
    }
    if task.held {
        return Some("a paused gate to open".to_owned());
    }
    // A task keeps its slot's flag once cancelled; it waits no longer.
    let waiting = waft_core::machine::WAITING.contains(task.status);
    if task.paced && waiting {
        return Some("its slot of the lambda's scheduling quota".to_owned());
    }
    if task.key_paced && waiting {
        let key = task.key.as_deref().unwrap_or_default();
        return Some(format!(
            "its slot of key {key:?}'s rate (the lambda's rate per key)"
        ));
    }
    if task.debounced && task.status == TaskStatus::New {
        let key = task.key.as_deref().unwrap_or_default();
        return Some(format!(
            "its debounce window: key {key:?}'s debounced tasks collapse into it"
        ));
    }
    match (&task.waiting_for_signal, task.waiting_for_children) {
        (Some(name), _) => Some(format!("signal {name:?}")),
        (None, true) => Some("its children to end".to_owned()),
        (None, false) => (task.status == TaskStatus::Suspended).then(|| "its time".to_owned()),
    }
}

pub(crate) fn task_json(task: &Task) -> serde_json::Value {
    json!({
        "id": task.id,
        "lambda": task.lambda,
        "collection": task.collection,
        "priority": task.priority,
        "status": task.status.as_str(),
        "attempt": task.attempt,
        "max_attempts": task.max_attempts,
        "scheduled_at": time(task.scheduled_at),
        "created_at": time(task.created_at),
        "next_trigger_at": task.next_trigger_at.map(time),
        "enqueued_at": task.enqueued_at.map(time),
        "claimed_at": task.claimed_at.map(time),
        "heartbeat_at": task.heartbeat_at.map(time),
        "finished_at": task.finished_at.map(time),
        "held": task.held,
        "parked": task.parked,
        "awaits_turn": task.awaits_turn,
        "paced": task.paced,
        "key_paced": task.key_paced,
        "debounced": task.debounced,
        "progress": task.progress,
        "last_error": task.last_error,
        "payload": json_bytes(&task.payload),
        "output": task.output.as_deref().map(json_bytes),
        "log": task.log,
        "parent_id": task.parent_id,
        "idempotency_key": task.idempotency_key,
        "key": task.key,
        "version": task.version,
        "waiting_for_signal": task.waiting_for_signal,
        "waiting_for_children": task.waiting_for_children,
        "then": task.continuation.as_ref().map(|then| json!({
            "lambda": then.lambda,
            "collection": then.collection,
            "priority": then.priority,
            "key": then.key,
        })),
    })
}

pub(super) fn print_task(task: &Task, as_json: bool) {
    if as_json {
        println!("{}", task_json(task));
        return;
    }
    let mut lines = vec![
        ("id", task.id.clone()),
        ("lambda", task.lambda.clone()),
        ("collection", task.collection.clone()),
        ("priority", task.priority.to_string()),
        ("status", task.status.as_str().to_owned()),
        (
            "attempts",
            format!("{} of {}", task.attempt, task.max_attempts),
        ),
        ("scheduled", time(task.scheduled_at)),
        ("created", time(task.created_at)),
    ];
    let times = [
        ("enqueued", task.enqueued_at),
        ("claimed", task.claimed_at),
        ("heartbeat", task.heartbeat_at),
        ("finished", task.finished_at),
        ("next trigger", task.next_trigger_at),
    ];
    lines.extend(
        times
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, time(v)))),
    );
    let optional = [
        (
            "waiting for",
            // Until its next trigger: the wait's end, or now once woken.
            waiting_for(task),
        ),
        ("key", task.key.clone()),
        ("progress", task.progress.clone()),
        ("last error", task.last_error.clone()),
        ("parent", task.parent_id.clone()),
        ("output", task.output.as_deref().map(show_bytes)),
    ];
    lines.extend(optional.into_iter().filter_map(|(k, v)| v.map(|v| (k, v))));
    for (key, value) in lines {
        println!("{key:<13}{value}");
    }
    if let Some(log) = &task.log {
        println!("log:");
        for line in log.lines() {
            println!("  {line}");
        }
    }
}
