//! Waft's shared vocabulary.
//!
//! Types every part of the platform agrees on and that carry no dependency on
//! a backend: the limits a lambda runs under and the units people write them
//! in, the model of tasks, lambdas, gates and schedules ([`model`]) and the
//! task state table ([`machine`]), and what
//! each role offers the others ([`roles`], answering [`ServiceError`]). Each
//! part builds its own machinery (store, queues, runtime, services) over
//! these, and a client needs nothing else (`waft-client`).

pub mod access;
pub mod backoff;
pub mod cron;
pub mod error;
pub mod fairness;
pub mod grants;
pub mod lambda;
pub mod limits;
pub mod machine;
pub mod model;
pub mod rate;
pub mod retention;
pub mod roles;
pub mod task;
pub mod trace;
pub mod units;

pub use backoff::{Backoff, MAX_RETRY_DELAY};
pub use cron::{CronError, CronSchedule};
pub use error::{ServiceError, ServiceResult};
pub use fairness::KeyFairness;
pub use grants::{GrantError, Grants, OutboundLimits, OutboundPattern};
pub use lambda::{ConfigError, LambdaConfig, OnDivergence};
pub use limits::{Limits, LimitsError};
pub use rate::KeyRate;
pub use task::{NameError, TaskStatus};
pub use trace::{TraceContext, TraceContextError};
pub use units::{ByteSize, ParseError, deserialize_duration, parse_duration};
