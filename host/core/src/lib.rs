//! Waft's shared vocabulary.
//!
//! Types every part of the platform agrees on and that carry no dependency on
//! a backend: the limits a lambda runs under, and the units people write
//! them in. Each part builds its own machinery (store, queues, runtime) over
//! these.

pub mod backoff;
pub mod cron;
pub mod lambda;
pub mod limits;
pub mod task;
pub mod units;

pub use backoff::{Backoff, MAX_RETRY_DELAY};
pub use cron::{CronError, CronSchedule};
pub use lambda::{ConfigError, LambdaConfig};
pub use limits::{Limits, LimitsError};
pub use task::{NameError, TaskStatus};
pub use units::{ByteSize, ParseError, parse_duration};
