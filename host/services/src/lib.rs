//! The roles of Waft's pipeline, as libraries the binaries wire together.
//!
//! Each role talks to the others only through narrow traits (`TaskStore`,
//! `TaskQueue`), so the embedded mode runs them all in one process on SQLite
//! and in-process queues, and the distributed mode runs each on its own on
//! Postgres and SQS, through the same code.

pub mod clock;
pub mod consumer;

pub use clock::{Clock, SystemClock};
pub use consumer::{ConsumerConfig, ConsumerError, PollReport, StoreConsumer, Wake};
