//! The roles of Waft's pipeline, as libraries the binaries wire together:
//! Frontend, Store Consumer, Controller, Executor and HSC.
//!
//! Each role reaches the others only through narrow traits: the store and
//! queues through `TaskStore` and `TaskQueue`, the other roles through
//! the Frontend's ([`ClientApi`], [`AdminApi`], [`ClusterApi`]; together
//! [`FrontendApi`]), [`ControllerApi`] and [`HscApi`]. In `waft dev` the
//! traits are the roles themselves, all in one process on SQLite and
//! in-process queues; in the distributed mode they are gRPC clients
//! (`waft-api`) and each role runs on its own on Postgres and SQS — through
//! the same code.

pub mod auth;
mod batch;
mod changes;
pub mod clock;
pub mod consumer;
pub mod controller;
pub mod executor;
pub mod fills;
pub mod frontend;
pub mod history;
pub mod hsc;
pub mod journal;
pub mod metrics;
pub mod periodic;
pub mod pruner;
pub mod quota;
pub mod secrets;
mod spans;
pub mod watchdog;

pub use clock::{Clock, StoreClock, SystemClock};
pub use consumer::{ConsumerConfig, ConsumerError, PollReport, StoreConsumer, Wake};
pub use controller::{Controller, ControllerConfig};
pub use executor::{Executor, ExecutorConfig};
pub use fills::{FillSignal, Fills};
pub use frontend::{DueSignal, Frontend};
pub use history::History;
pub use hsc::Hsc;
pub use journal::{ExecutionJournal, JournalEvent, JournalRecord, read_journal};
pub use periodic::{Periodic, PeriodicReport};
pub use pruner::{Pruner, RetentionConfig};
pub use waft_core::error::{self, ServiceError, ServiceResult};
pub use waft_core::roles::{
    self as api, AdminApi, ClientApi, ClusterApi, ControllerApi, CronRequest, FrontendApi,
    HistoryAnswer, HistoryQuery, HscApi, JournalCommit, JournalPage, LambdaSlots, NextWork, RunAt,
    TaskRequest,
};
/// Locks a mutex, taking over a poisoned one: every value the roles keep
/// behind a mutex stays valid when a holder panics.
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub use watchdog::{
    HeartbeatConfig, HeartbeatFailure, HeartbeatSink, UnsafeHeartbeat, WatchEnd, Watched, watch,
};

/// A journal entry of an outside call with an answer of `answer` bytes,
/// for the tests of the modules that carry journals.
#[cfg(test)]
pub(crate) fn journal_entry(seq: u32, answer: usize) -> waft_store::JournalEntry {
    waft_store::JournalEntry {
        seq,
        call: "wasi:http/outgoing-handler.handle".into(),
        digest: vec![0; 32],
        answer: vec![b'a'; answer],
        summary: "POST https://pay.example/charge → 201".into(),
        outside: true,
        attempt: 1,
        at: 0,
        took_us: 1,
    }
}
