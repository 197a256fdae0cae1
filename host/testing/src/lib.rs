//! Real backing services for tests, started by the tests themselves.
//!
//! A test that needs Postgres asks [`postgres`] for a fresh database, one
//! that needs SQS asks [`sqs`] for a server; one whose lambda calls out
//! starts an [`HttpServer`] (always available: it is in-process); one that
//! drives the dashboard asks for a [`browser`]; one that follows traces
//! starts an [`OtlpReceiver`] (in-process too). On a
//! laptop without PostgreSQL it gets `None` and a printed reason, and may
//! skip; under `CI=true` the same condition fails the test instead, so CI
//! never passes by skipping.

mod browser;
pub mod http;
pub mod otlp;
mod postgres;
mod sqs;

pub use browser::{Browser, browser};
pub use http::HttpServer;
pub use otlp::{OtlpReceiver, ReceivedSpan};

pub use postgres::{Durability, TestPostgres, postgres};
pub use sqs::{TestSqs, sqs};

/// Whether this run is CI's (`CI=true`), where nothing may be skipped.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|value| value == "true" || value == "1")
}

/// Skips (returns `None` with a printed reason) outside CI, fails in CI.
fn unavailable<T>(service: &str, why: &str) -> Option<T> {
    if in_ci() {
        panic!("{service} is required under CI=true but unavailable: {why}");
    }
    eprintln!("skipping: {service} unavailable: {why}");
    None
}

/// A loopback port nobody listens on right now.
fn free_port() -> Option<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").ok()?;
    Some(listener.local_addr().ok()?.port())
}
