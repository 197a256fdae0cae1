//! `script`: a lambda that runs the program its payload holds, one step
//! after another, for the durable journal's generated test
//! (`host/services/tests/services/journal_model.rs`), which runs the same
//! program through a reference model of the journal's rules.
//!
//! The payload is `{"url": "http://…", "steps": [...]}`; a step is one of
//! - `{"post": "TAG"}`: a POST to `URL/TAG`, alone;
//! - `{"group": ["A", "B"]}`: POSTs to each tag, all in flight at once,
//!   their answers read in the group's order;
//! - `"clock"`, `"random"`: a read of the wall clock, a random draw;
//! - `{"heartbeat": N}`: N heartbeats in a row;
//! - `"child"`: schedules a child of this lambda (an empty program);
//! - `"wait_children"`: waits for every child scheduled so far to end;
//! - `{"sleep_ms": MS}`: a durable sleep;
//! - `{"crash": K}`: traps when this is attempt K;
//! - `{"give_up": {"through": K, "if_failed": B, "fatal": B}}`: gives up
//!   (`retriable`, or `fatal`) on attempts 1 to K, or, with
//!   `if_failed`, when a request of this attempt failed (replayed or
//!   live: no answer, a 429 or a 5xx).
//!
//! Every request carries an `Idempotency-Key` numbered in call order, as
//! the SDK's client numbers them, so a request repeated by a later attempt
//! carries the same key. The output names the status each tag got (or
//! `"error"`), the attempt, and the children's ids.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::Deserialize;
use serde_json::json;
use waft_sdk::{Child, Error, Outcome, Task, TaskId, heartbeat, http, lambda, schedule};
use wasip2::http::outgoing_handler;
use wasip2::http::types::{Fields, FutureIncomingResponse, Method, OutgoingBody, OutgoingRequest};

#[derive(Deserialize, Default)]
#[serde(default)]
struct Program {
    url: String,
    steps: Vec<Step>,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum Step {
    Post(String),
    Group(Vec<String>),
    Clock,
    Random,
    Heartbeat(u32),
    Child,
    WaitChildren,
    SleepMs(u64),
    Crash(u32),
    GiveUp(GiveUp),
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct GiveUp {
    through: u32,
    if_failed: bool,
    fatal: bool,
}

/// What one attempt saw so far.
struct Run {
    key: String,
    /// Requests made so far, for their idempotency keys.
    sent: u32,
    failed: bool,
    answers: BTreeMap<String, String>,
    children: Vec<TaskId>,
}

impl Run {
    fn next_key(&mut self) -> String {
        let key = format!("{}-{}", self.key, self.sent);
        self.sent += 1;
        key
    }

    fn answered(&mut self, tag: &str, status: Option<u16>) {
        if status.is_none_or(|s| s == 429 || s >= 500) {
            self.failed = true;
        }
        let shown = status.map_or_else(|| "error".to_owned(), |s| s.to_string());
        self.answers.insert(tag.to_owned(), shown);
    }
}

#[lambda]
fn script(task: Task) -> Result<Outcome, Error> {
    let program: Program = task.json()?;
    let attempt = task.attempt();
    let mut run = Run {
        key: task.idempotency_key(),
        sent: 0,
        failed: false,
        answers: BTreeMap::new(),
        children: Vec::new(),
    };
    for step in &program.steps {
        match step {
            Step::Post(tag) => {
                let key = run.next_key();
                let status = http::post(format!("{}/{tag}", program.url))
                    .idempotency_key(Some(key))
                    .send()
                    .ok()
                    .map(|r| r.status());
                run.answered(tag, status);
            }
            Step::Group(tags) => {
                let pending: Vec<_> = tags
                    .iter()
                    .map(|tag| {
                        let key = run.next_key();
                        (tag, start_post(&program.url, tag, &key))
                    })
                    .collect();
                for (tag, future) in pending {
                    let status = future.and_then(finish_post);
                    run.answered(tag, status);
                }
            }
            Step::Clock => {
                std::hint::black_box(SystemTime::now());
            }
            Step::Random => {
                std::hint::black_box(wasip2::random::random::get_random_u64());
            }
            Step::Heartbeat(n) => {
                for _ in 0..*n {
                    let _ = heartbeat();
                }
            }
            Step::Child => {
                let child = Child::new("script").json(&json!({"steps": []}))?;
                match schedule(child) {
                    Ok(id) => run.children.push(id),
                    Err(e) => return Err(Error::retriable(e.to_string())),
                }
            }
            Step::WaitChildren => {
                waft_sdk::children::wait_all(&run.children);
            }
            Step::SleepMs(ms) => waft_sdk::sleep(Duration::from_millis(*ms)),
            Step::Crash(k) => {
                if *k == attempt {
                    panic!("crashing on attempt {k}, as the program says");
                }
            }
            Step::GiveUp(give_up) => {
                if attempt <= give_up.through || (give_up.if_failed && run.failed) {
                    let why = format!("giving up on attempt {attempt}, as the program says");
                    return Ok(if give_up.fatal {
                        Outcome::fatal(why)
                    } else {
                        Outcome::retry(why)
                    });
                }
            }
        }
    }
    let children: Vec<String> = run.children.into_iter().map(|id| id.0).collect();
    Outcome::json(&json!({
        "attempt": attempt,
        "answers": run.answers,
        "children": children,
    }))
}

/// Sends an empty POST to `URL/TAG` with `key`; its response to come.
fn start_post(url: &str, tag: &str, key: &str) -> Option<FutureIncomingResponse> {
    let rest = url.strip_prefix("http://")?;
    let (authority, base) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
    let path = if base.is_empty() {
        format!("/{tag}")
    } else {
        format!("/{base}/{tag}")
    };
    let headers =
        Fields::from_list(&[("idempotency-key".to_owned(), key.as_bytes().to_vec())]).ok()?;
    let request = OutgoingRequest::new(headers);
    request.set_method(&Method::Post).ok()?;
    request
        .set_scheme(Some(&wasip2::http::types::Scheme::Http))
        .ok()?;
    request.set_authority(Some(authority)).ok()?;
    request.set_path_with_query(Some(&path)).ok()?;
    let body = request.body().ok()?;
    let pending = outgoing_handler::handle(request, None).ok()?;
    OutgoingBody::finish(body, None).ok()?;
    Some(pending)
}

/// The status of a response once its whole body is read; `None` when it
/// failed.
fn finish_post(pending: FutureIncomingResponse) -> Option<u16> {
    pending.subscribe().block();
    let response = pending.get()?.ok()?.ok()?;
    let status = response.status();
    let incoming = response.consume().ok()?;
    {
        let stream = incoming.stream().ok()?;
        loop {
            match stream.blocking_read(64 * 1024) {
                Ok(_) => {}
                Err(wasip2::io::streams::StreamError::Closed) => break,
                Err(_) => return None,
            }
        }
    }
    drop(wasip2::http::types::IncomingBody::finish(incoming));
    Some(status)
}
