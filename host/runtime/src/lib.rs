//! The Waft lambda runtime: runs WebAssembly components of the
//! `waft:lambda` world in wasmtime, one fresh sandboxed instance per task.
//!
//! This crate alone touches `wasmtime::Config`. It knows nothing of stores,
//! queues or RPC: the platform hands it a component, a task, limits, a
//! [`TaskHost`] for the lambda's calls out, and a [`KillSwitch`]; it hands
//! back an [`Execution`].
//!
//! ```no_run
//! use std::sync::Arc;
//! use waft_runtime::{KillSwitch, RecordingHost, Runtime, RuntimeConfig, TaskInput};
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let runtime = Runtime::new(RuntimeConfig::default())?;
//! let lambda = runtime.prepare(&std::fs::read("hello.wasm")?).await?;
//! let task = TaskInput {
//!     id: "t1".into(),
//!     lambda: "hello".into(),
//!     collection: "default".into(),
//!     priority: 0,
//!     attempt: 1,
//!     scheduled_at: std::time::SystemTime::now(),
//!     payload: br#"{"name":"Ada"}"#.to_vec(),
//!     journal: Vec::new(),
//! };
//! let execution = lambda
//!     .run(task, &Default::default(), Arc::new(RecordingHost::default()), &KillSwitch::new())
//!     .await;
//! println!("{:?}", execution.outcome);
//! # Ok(()) }
//! ```

mod artifact;
mod cache;
mod capabilities;
mod contract;
mod durable;
mod engine;
mod error;
mod guests;
mod host;
mod kill;
mod lambda;
mod limiter;
mod log;
mod outbound;
mod outcome;
mod redact;
mod run;

pub use artifact::ArtifactKey;
pub use contract::HANDLER_EXPORTS;
pub use durable::{Divergence, Parting};
pub use engine::{Allocator, Runtime, RuntimeConfig};
pub use error::{LoadError, RuntimeError};
pub use host::{ChildRequest, LeaseLost, RecordingHost, ScheduleRejection, TaskHost, Unread};
pub use kill::KillSwitch;
pub use lambda::{Digest, PreparedLambda};
pub use log::{Level, LogRecord, LogSource, TaskLog};
pub use outbound::OutboundRecord;
pub use outcome::{Execution, Limit, Outcome};
pub use run::{Sandbox, TaskInput};
