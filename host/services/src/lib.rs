//! The roles of Waft's pipeline, as libraries the binaries wire together:
//! so far the Store Consumer and the executor's heartbeat watchdog.
//!
//! Each role talks to the others only through narrow traits (`TaskStore`,
//! `TaskQueue`), so the embedded mode runs them all in one process on SQLite
//! and in-process queues, and the distributed mode runs each on its own on
//! Postgres and SQS, through the same code.

pub mod clock;
pub mod consumer;
pub mod watchdog;

pub use clock::{Clock, SystemClock};
pub use consumer::{ConsumerConfig, ConsumerError, PollReport, StoreConsumer, Wake};
pub use watchdog::{
    HeartbeatConfig, HeartbeatFailure, HeartbeatSink, UnsafeHeartbeat, WatchEnd, watch,
};
