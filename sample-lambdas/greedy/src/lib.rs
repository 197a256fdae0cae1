//! `greedy`: makes the platform hold or carry as many bytes as it can, one
//! way per task, chosen by its payload. Every attack must stay inside the
//! budgets of its own lambda and leave other lambdas untouched.
//!
//! The payload is JSON: `{"attack": NAME, ...}`, where NAME is one of
//!
//! - `empty-logs` — empty log records (and records of empty fields) for
//!   `for_ms` milliseconds;
//! - `newlines` — 64 KiB writes of bare newlines to stdout for `for_ms`;
//! - `note` — one heartbeat whose progress note is `bytes` long and starts
//!   with the value of the configuration variable `secret` (if set), then
//!   runs `for_ms` more after the heartbeat, so that the note is delivered
//!   while it runs (the executor sends notes with its next beat);
//! - `output` — succeeds with an output of `bytes` bytes;
//! - `fields` — creates `count` wasi:http `fields` handles and keeps them;
//! - `sockets` — starts `count` outbound requests to `url` at once and holds
//!   them open for `for_ms`;
//! - `children` — schedules `count` children of lambda `child` (itself by
//!   default, with `{"attack": "output", "bytes": 0}`).
//!
//! The output says how far it got (`{"done": N}`), which is how a test tells
//! a refusal from success.

use std::io::Write;
use std::time::{Duration, Instant};

use serde::Deserialize;
use waft_sdk::Level;
use waft_sdk::{Error, Outcome, Task, lambda};
use wasip2::http::outgoing_handler;
use wasip2::http::types::{Fields, OutgoingRequest, Scheme};

#[derive(Deserialize)]
struct Attack {
    attack: String,
    #[serde(default)]
    for_ms: u64,
    #[serde(default)]
    bytes: usize,
    #[serde(default)]
    count: usize,
    #[serde(default)]
    url: String,
    #[serde(default)]
    child: Option<String>,
}

#[lambda]
fn greedy(task: Task) -> Result<Outcome, Error> {
    let attack: Attack = serde_json::from_slice(task.payload())
        .map_err(|e| Error::fatal(format!("payload: {e}")))?;
    let deadline = Instant::now() + Duration::from_millis(attack.for_ms);
    let mut done = 0usize;
    match attack.attack.as_str() {
        "empty-logs" => {
            while Instant::now() < deadline {
                for _ in 0..1_000 {
                    waft_sdk::log(Level::Info, "");
                    waft_sdk::log_fields(Level::Info, "", &[("", "")]);
                }
                done += 2_000;
            }
        }
        "newlines" => {
            let chunk = vec![b'\n'; 64 * 1024];
            let mut stdout = std::io::stdout();
            while Instant::now() < deadline {
                stdout
                    .write_all(&chunk)
                    .map_err(|e| Error::retriable(format!("stdout: {e}")))?;
                done += 1;
            }
            let _ = stdout.flush();
        }
        "note" => {
            let mut note = waft_sdk::config::get("secret").unwrap_or_default();
            note.extend(std::iter::repeat_n(
                'n',
                attack.bytes.saturating_sub(note.len()),
            ));
            waft_sdk::heartbeat_with(note).map_err(|lost| Error::retriable(lost.to_string()))?;
            done = 1;
            let deadline = Instant::now() + Duration::from_millis(attack.for_ms);
            while Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        "output" => return Ok(Outcome::success_with(vec![b'o'; attack.bytes])),
        "fields" => {
            let mut kept = Vec::with_capacity(attack.count.min(1 << 20));
            for _ in 0..attack.count {
                kept.push(Fields::new());
                done += 1;
            }
        }
        "sockets" => {
            let mut pending = Vec::new();
            for _ in 0..attack.count {
                match start_request(&attack.url) {
                    Ok(request) => pending.push(request),
                    Err(why) => waft_sdk::log(Level::Warn, &why),
                }
            }
            done = pending.len();
            while Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        "children" => {
            let child = attack.child.unwrap_or_else(|| task.lambda().to_owned());
            for _ in 0..attack.count {
                let spec = waft_sdk::Child::new(child.clone())
                    .json(&serde_json::json!({"attack": "output", "bytes": 0}))?;
                match waft_sdk::schedule(spec) {
                    Ok(_) => done += 1,
                    Err(why) => {
                        waft_sdk::log(Level::Warn, &format!("child refused: {why}"));
                        break;
                    }
                }
            }
        }
        other => return Err(Error::fatal(format!("unknown attack {other:?}"))),
    }
    Outcome::json(&serde_json::json!({ "done": done }))
}

/// Starts a GET of `url` (`http://HOST:PORT/PATH`) and returns its pending
/// response without waiting for it.
fn start_request(url: &str) -> Result<outgoing_handler::FutureIncomingResponse, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("not an http URL: {url}"))?;
    let (authority, path) = match rest.find('/') {
        Some(at) => (&rest[..at], &rest[at..]),
        None => (rest, "/"),
    };
    let request = OutgoingRequest::new(Fields::new());
    request
        .set_scheme(Some(&Scheme::Http))
        .map_err(|()| "scheme".to_owned())?;
    request
        .set_authority(Some(authority))
        .map_err(|()| "authority".to_owned())?;
    request
        .set_path_with_query(Some(path))
        .map_err(|()| "path".to_owned())?;
    outgoing_handler::handle(request, None).map_err(|code| format!("refused: {code:?}"))
}
