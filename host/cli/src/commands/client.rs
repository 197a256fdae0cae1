//! What every client command shares: where the server is, how its errors
//! become exit codes, and how times and bytes are shown.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;
use waft_api::FrontendClient;
use waft_services::ServiceError;

use crate::exit::{self, Failure};

/// Where the Waft server is, and how to print.
#[derive(Debug, Clone, Args)]
pub struct ClientArgs {
    /// The Frontend's address (`host:port`).
    #[arg(
        long,
        env = "WAFT_SERVER",
        default_value = "127.0.0.1:7070",
        global = true
    )]
    pub server: String,
    /// Print JSON for scripts instead of text.
    #[arg(long, global = true)]
    pub json: bool,
}

impl ClientArgs {
    /// A Frontend client; call within a tokio runtime.
    pub fn frontend(&self) -> Result<FrontendClient, Failure> {
        let channel = waft_api::channel(&self.server).map_err(|e| self.failure(e))?;
        Ok(FrontendClient::new(channel))
    }

    /// The failure that reports a call's error.
    pub fn failure(&self, error: ServiceError) -> Failure {
        match error {
            ServiceError::InvalidArgument(message) => Failure::usage(message),
            ServiceError::NotFound(message) => Failure {
                code: exit::NOT_FOUND,
                message,
            },
            ServiceError::FailedPrecondition(message)
            | ServiceError::ResourceExhausted(message) => Failure {
                code: exit::REFUSED,
                message,
            },
            ServiceError::Unavailable(message) => Failure {
                code: exit::UNAVAILABLE,
                message: format!(
                    "cannot reach the Waft server at {}: {message} (is `waft dev` running? point \
                     --server or WAFT_SERVER at the Frontend)",
                    self.server
                ),
            },
            ServiceError::Internal(message) => Failure::internal(message),
        }
    }
}

/// Runs a client command's future on a small runtime.
pub fn block_on<T>(
    future: impl std::future::Future<Output = Result<T, Failure>>,
) -> Result<T, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::internal(format!("cannot start the async runtime: {e}")))?
        .block_on(future)
}

/// A Unix-millisecond time as RFC 3339.
pub fn time(ms: i64) -> String {
    let at = UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_millis(at).to_string()
}

/// `--at`: RFC 3339 (`2026-11-22T10:00:00Z`) or Unix milliseconds.
pub fn parse_time(text: &str) -> Result<i64, String> {
    if let Ok(ms) = text.parse::<i64>() {
        return Ok(ms);
    }
    let at: SystemTime = humantime::parse_rfc3339_weak(text).map_err(|e| {
        format!("{text:?} is not a time ({e}); use RFC 3339 like 2026-11-22T10:00:00Z or Unix milliseconds")
    })?;
    at.duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .map_err(|_| format!("{text:?} is before 1970"))
}

/// Bytes for a person: the text when it is UTF-8, else their size.
pub fn show_bytes(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => text.to_owned(),
        Err(_) => format!("<{} bytes of binary data>", bytes.len()),
    }
}

/// Bytes in JSON: a string when UTF-8, else `{"hex": "…"}`.
pub fn json_bytes(bytes: &[u8]) -> serde_json::Value {
    match std::str::from_utf8(bytes) {
        Ok(text) => serde_json::Value::String(text.to_owned()),
        Err(_) => serde_json::json!({ "hex": hex::encode(bytes) }),
    }
}
