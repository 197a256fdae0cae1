//! `hello-v0-1`: a lambda of the first contract, `waft:lambda@0.1.0`, with
//! its single `host` interface, written on wit-bindgen directly as lambdas
//! were before the SDK moved to 0.2.0. It exists so the tests prove that
//! such components keep deploying and running unchanged.
//!
//! Its payload is a name, as text or as a JSON string; it logs, heartbeats with a progress note, and
//! answers `Hello, NAME!` (`world` when the payload is empty). A payload of
//! `child` also schedules a child of `hello`; `fail` is a fatal outcome.

wit_bindgen::generate!({
    path: "../../wit/released/lambda-0.1.0",
    world: "waft:lambda/lambda@0.1.0",
});

use exports::waft::lambda::handler::Guest;
use waft::lambda::host;
use waft::lambda::types::{Outcome, Task};

struct HelloV01;

impl Guest for HelloV01 {
    fn handle(task: Task) -> Outcome {
        let text = String::from_utf8_lossy(&task.payload);
        let name = text.trim_matches('"');
        host::log(
            host::Level::Info,
            "greeting",
            &[("attempt".to_owned(), task.attempt.to_string())],
        );
        if let Err(lost) = host::heartbeat(Some("half way")) {
            return Outcome::Fatal(lost.reason);
        }
        match name {
            "fail" => Outcome::Fatal("asked to fail".to_owned()),
            "child" => {
                let child = host::ChildTask {
                    lambda: "hello".to_owned(),
                    payload: Vec::new(),
                    collection: None,
                    priority: None,
                    not_before: None,
                };
                match host::schedule(&child) {
                    Ok(id) => Outcome::Success(Some(id.into_bytes())),
                    Err(error) => Outcome::Fatal(format!("{error:?}")),
                }
            }
            "" => Outcome::Success(Some(b"Hello, world!".to_vec())),
            name => Outcome::Success(Some(format!("Hello, {name}!").into_bytes())),
        }
    }
}

export!(HelloV01);
