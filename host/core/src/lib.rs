//! Waft's shared vocabulary.
//!
//! Types every part of the platform agrees on and that carry no dependency on
//! a backend: the limits a lambda runs under, and the units people write
//! them in. Each part builds its own machinery (store, queues, runtime) over
//! these.

pub mod limits;
pub mod units;

pub use limits::{Limits, LimitsError};
pub use units::{ByteSize, ParseError, parse_duration};
