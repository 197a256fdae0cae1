//! Real backing services for tests, started by the tests themselves.
//!
//! A test that needs Postgres asks [`postgres`] for a fresh database. On a
//! laptop without PostgreSQL it gets `None` and a printed reason, and may
//! skip; under `CI=true` the same condition fails the test instead, so CI
//! never passes by skipping.

mod postgres;

pub use postgres::{Durability, TestPostgres, postgres};

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
