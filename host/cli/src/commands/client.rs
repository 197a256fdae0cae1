//! What every client command shares: where the server is, how its errors
//! become exit codes, and how times and bytes are shown.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;
use waft_client::FrontendClient;
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
    /// Connect over TLS, verifying the server with these certificates (PEM).
    #[arg(long, value_name = "FILE", env = "WAFT_CA", global = true)]
    pub ca: Option<std::path::PathBuf>,
    /// The API token, when the server requires one.
    #[arg(long, env = "WAFT_TOKEN", global = true, hide_env_values = true)]
    pub token: Option<String>,
    /// Print JSON for scripts instead of text.
    #[arg(long, global = true)]
    pub json: bool,
}

impl ClientArgs {
    /// A Frontend client; call within a tokio runtime.
    pub fn frontend(&self) -> Result<FrontendClient, Failure> {
        let ca = match &self.ca {
            Some(path) => Some(std::fs::read(path).map_err(|e| {
                Failure::usage(format!("cannot read the CA file {}: {e}", path.display()))
            })?),
            None => None,
        };
        let options = waft_client::ChannelOptions {
            token: self.token.as_deref(),
            ca: ca.as_deref(),
        };
        let channel =
            waft_client::channel_with(&self.server, options).map_err(|e| self.failure(e))?;
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
            ServiceError::Unauthenticated(message) | ServiceError::PermissionDenied(message) => {
                Failure {
                    code: exit::NOT_ALLOWED,
                    message,
                }
            }
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

/// A task's payload on the command line: JSON, or any bytes from a file.
#[derive(Debug, clap::Args)]
pub struct PayloadArgs {
    /// The payload, as JSON.
    #[arg(long, value_name = "JSON", conflicts_with = "payload_file")]
    pub payload: Option<String>,
    /// Read the payload (any bytes) from a file; `-` for stdin.
    #[arg(long, value_name = "FILE")]
    pub payload_file: Option<std::path::PathBuf>,
}

impl PayloadArgs {
    /// The payload's bytes; empty when none was given.
    pub fn read(&self) -> Result<Vec<u8>, Failure> {
        if let Some(json) = &self.payload {
            if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(json) {
                return Err(Failure::usage(format!(
                    "--payload is not valid JSON ({e}); pass raw bytes with --payload-file instead"
                )));
            }
            return Ok(json.clone().into_bytes());
        }
        match &self.payload_file {
            // The server enforces each lambda's own limit; this only bounds
            // what is read.
            Some(path) => crate::commands::invoke::read_limited(
                path,
                waft_core::LambdaConfig::MAX_PAYLOAD.bytes(),
            ),
            None => Ok(Vec::new()),
        }
    }
}
