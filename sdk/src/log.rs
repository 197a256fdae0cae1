//! The task's log (`waft:lambda/log`): records with a level and fields,
//! and the `trace!` … `error!` macros.

use crate::bindings::waft::lambda::log as raw;

/// Severity of a log record.
///
/// ```
/// assert!(waft_sdk::Level::Error > waft_sdk::Level::Info);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Step-by-step detail.
    Trace,
    /// Detail for whoever debugs the lambda.
    Debug,
    /// Normal progress.
    Info,
    /// Something odd that did not stop the task.
    Warn,
    /// Something failed.
    Error,
}

impl From<Level> for raw::Level {
    fn from(level: Level) -> Self {
        match level {
            Level::Trace => raw::Level::Trace,
            Level::Debug => raw::Level::Debug,
            Level::Info => raw::Level::Info,
            Level::Warn => raw::Level::Warn,
            Level::Error => raw::Level::Error,
        }
    }
}

/// Appends a record to the task's log. The macros ([`info!`](crate::info)
/// and friends) are usually handier.
///
/// ```no_run
/// waft_sdk::log(waft_sdk::Level::Warn, "quota almost used up");
/// ```
pub fn log(level: Level, message: &str) {
    raw::log(level.into(), message, &[]);
}

/// Appends a record with structured fields to the task's log.
///
/// ```no_run
/// waft_sdk::log_fields(waft_sdk::Level::Info, "sent", &[("to", "ada@example.com"), ("bytes", "512")]);
/// ```
pub fn log_fields(level: Level, message: &str, fields: &[(&str, &str)]) {
    let fields: Vec<(String, String)> = fields
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    raw::log(level.into(), message, &fields);
}

/// Logs at [`Level::Trace`] with `format!` arguments.
///
/// ```no_run
/// waft_sdk::trace!("entering step {}", 3);
/// ```
#[macro_export]
macro_rules! trace {
    ($($arg:tt)+) => { $crate::log($crate::Level::Trace, &::std::format!($($arg)+)) };
}

/// Logs at [`Level::Debug`] with `format!` arguments.
///
/// ```no_run
/// waft_sdk::debug!("cache has {} entries", 12);
/// ```
#[macro_export]
macro_rules! debug {
    ($($arg:tt)+) => { $crate::log($crate::Level::Debug, &::std::format!($($arg)+)) };
}

/// Logs at [`Level::Info`] with `format!` arguments.
///
/// ```no_run
/// waft_sdk::info!("processed {} rows", 42);
/// ```
#[macro_export]
macro_rules! info {
    ($($arg:tt)+) => { $crate::log($crate::Level::Info, &::std::format!($($arg)+)) };
}

/// Logs at [`Level::Warn`] with `format!` arguments.
///
/// ```no_run
/// waft_sdk::warn!("retrying after {} ms", 250);
/// ```
#[macro_export]
macro_rules! warn {
    ($($arg:tt)+) => { $crate::log($crate::Level::Warn, &::std::format!($($arg)+)) };
}

/// Logs at [`Level::Error`] with `format!` arguments.
///
/// ```no_run
/// waft_sdk::error!("upstream answered {}", 503);
/// ```
#[macro_export]
macro_rules! error {
    ($($arg:tt)+) => { $crate::log($crate::Level::Error, &::std::format!($($arg)+)) };
}
