//! `webhook`: POSTs a JSON document to a URL and judges the answer as a
//! webhook caller should. `{"url": "https://hooks.example.com/x",
//! "body": {...}, "timeout_ms": 5000}` (`body` defaults to `{}`).
//!
//! 2xx is a success, its output `{"status", "body", "idempotency_key"}`
//! (the key the request carried); 429 and 5xx are retriable, after the
//! server's `Retry-After` (seconds) when it gives one; any other status is
//! fatal. A refused destination is fatal (the grant is missing, retrying
//! will not help); a timeout or a connection failure is retriable.
//!
//! Configuration: the secret `WEBHOOK_TOKEN`, when set, is sent as a bearer
//! token; the variable `SOURCE`, when set, as the `x-waft-source` header.

use std::time::Duration;

use serde::Deserialize;
use waft_sdk::http::{self, HttpError};
use waft_sdk::{Error, Outcome, Task, config, lambda};

#[derive(Deserialize)]
struct Call {
    url: String,
    #[serde(default)]
    body: serde_json::Value,
    timeout_ms: Option<u64>,
}

#[lambda]
fn webhook(task: Task) -> Result<Outcome, Error> {
    let call: Call = task.json()?;
    let body = match call.body {
        serde_json::Value::Null => serde_json::json!({}),
        body => body,
    };
    let mut request = http::post(&call.url)
        .json(&body)
        .map_err(|e| Error::fatal(e.to_string()))?;
    if let Some(token) = config::get("WEBHOOK_TOKEN") {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    if let Some(source) = config::get("SOURCE") {
        request = request.header("x-waft-source", source);
    }
    if let Some(ms) = call.timeout_ms {
        request = request.timeout(Duration::from_millis(ms));
    }
    let response = match request.send() {
        Ok(response) => response,
        Err(HttpError::Denied) => {
            return Ok(Outcome::fatal(format!(
                "{} was refused: see the log",
                call.url
            )));
        }
        Err(HttpError::Invalid(why)) => return Ok(Outcome::fatal(why)),
        Err(error) => return Ok(Outcome::retry(error.to_string())),
    };
    let status = response.status();
    match status {
        200..=299 => Outcome::json(&serde_json::json!({
            "status": status,
            "body": response.text(),
            "idempotency_key": format!("{}-0", task.idempotency_key()),
        })),
        429 | 500..=599 => {
            let message = format!("{} answered {status}", call.url);
            Ok(
                match response
                    .header("retry-after")
                    .and_then(|s| s.trim().parse::<u64>().ok())
                {
                    Some(seconds) => Outcome::retry_after(message, Duration::from_secs(seconds)),
                    None => Outcome::retry(message),
                },
            )
        }
        _ => Ok(Outcome::fatal(format!(
            "{} answered {status}: {}",
            call.url,
            response.text()
        ))),
    }
}
