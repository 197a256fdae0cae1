//! Calls from a lambda into the Waft host: heartbeat, log, schedule.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::Error;

/// The generated WebAssembly glue; the only place that names wit-bindgen.
#[allow(missing_docs, reason = "generated code")]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "waft:lambda/lambda@0.1.0",
        pub_export_macro: true,
        export_macro_name: "export",
        default_bindings_module: "::waft_sdk::__private::bindings",
        runtime_path: "::waft_sdk::__private::bindings::wit_bindgen_rt",
    });

    #[doc(hidden)]
    pub use wit_bindgen::rt as wit_bindgen_rt;
}

use bindings::waft::lambda::host as raw;

/// The execution lost its lease on the task: another executor may run it now.
///
/// Stop at once and cause no further side effects; the host refuses every
/// later call of this execution anyway.
///
/// ```no_run
/// fn step() -> waft_sdk::Outcome {
///     if let Err(lost) = waft_sdk::heartbeat() {
///         return waft_sdk::Outcome::retry(lost.to_string());
///     }
///     waft_sdk::Outcome::success()
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseLost {
    /// Why the host gave the lease up.
    pub reason: String,
}

impl std::fmt::Display for LeaseLost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "lease lost: {}", self.reason)
    }
}

impl std::error::Error for LeaseLost {}

/// Tells the platform this execution is alive.
///
/// The host heartbeats on a lambda's behalf while its instance runs; call
/// this between long steps to learn early that the lease is gone.
///
/// ```no_run
/// for step in 0..10 {
///     // ... one step of work ...
///     waft_sdk::heartbeat()?;
/// }
/// # Ok::<(), waft_sdk::LeaseLost>(())
/// ```
pub fn heartbeat() -> Result<(), LeaseLost> {
    raw::heartbeat(None).map_err(|lost| LeaseLost {
        reason: lost.reason,
    })
}

/// Like [`heartbeat`], with a progress note shown in the task's status.
///
/// ```no_run
/// waft_sdk::heartbeat_with("3 of 10 files uploaded")?;
/// # Ok::<(), waft_sdk::LeaseLost>(())
/// ```
pub fn heartbeat_with(progress: impl Into<String>) -> Result<(), LeaseLost> {
    raw::heartbeat(Some(&progress.into())).map_err(|lost| LeaseLost {
        reason: lost.reason,
    })
}

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

/// The id of a task, as the platform gave it.
///
/// ```
/// let id = waft_sdk::TaskId("01J9Z3".into());
/// assert_eq!(id.to_string(), "01J9Z3");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TaskId(pub String);

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A child task to [`schedule`].
///
/// ```no_run
/// use std::time::Duration;
/// let child = waft_sdk::Child::new("send-email")
///     .json(&serde_json::json!({ "to": "ada@example.com" }))?
///     .collection("password-reset")
///     .priority(2)
///     .delay(Duration::from_secs(60));
/// # Ok::<(), waft_sdk::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Child {
    lambda: String,
    payload: Vec<u8>,
    collection: Option<String>,
    priority: Option<u8>,
    not_before: Option<SystemTime>,
}

impl Child {
    /// A child task of `lambda` with an empty payload, due now.
    ///
    /// ```no_run
    /// let child = waft_sdk::Child::new("resize-image");
    /// ```
    pub fn new(lambda: impl Into<String>) -> Self {
        Self {
            lambda: lambda.into(),
            payload: Vec::new(),
            collection: None,
            priority: None,
            not_before: None,
        }
    }

    /// Sets the payload bytes.
    ///
    /// ```no_run
    /// let child = waft_sdk::Child::new("echo").payload(b"raw bytes".to_vec());
    /// ```
    pub fn payload(mut self, payload: impl Into<Vec<u8>>) -> Self {
        self.payload = payload.into();
        self
    }

    /// Sets the payload to `value` serialised as JSON.
    ///
    /// ```no_run
    /// let child = waft_sdk::Child::new("echo").json(&[1, 2, 3])?;
    /// # Ok::<(), waft_sdk::Error>(())
    /// ```
    pub fn json<T: serde::Serialize + ?Sized>(mut self, value: &T) -> Result<Self, Error> {
        self.payload = serde_json::to_vec(value)
            .map_err(|e| Error::fatal(format!("cannot serialise the child's payload: {e}")))?;
        Ok(self)
    }

    /// Schedules the child in `collection` instead of `default`.
    ///
    /// ```no_run
    /// let child = waft_sdk::Child::new("send-email").collection("marketing");
    /// ```
    pub fn collection(mut self, collection: impl Into<String>) -> Self {
        self.collection = Some(collection.into());
        self
    }

    /// Sets the child's priority instead of the lambda's default.
    ///
    /// ```no_run
    /// let child = waft_sdk::Child::new("send-email").priority(3);
    /// ```
    pub fn priority(mut self, priority: u8) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Runs the child no sooner than `delay` from now.
    ///
    /// ```no_run
    /// let child = waft_sdk::Child::new("reminder").delay(std::time::Duration::from_secs(3600));
    /// ```
    pub fn delay(mut self, delay: Duration) -> Self {
        self.not_before = Some(SystemTime::now() + delay);
        self
    }

    /// Runs the child no sooner than `at`.
    ///
    /// ```no_run
    /// let child = waft_sdk::Child::new("reminder").at(std::time::SystemTime::now());
    /// ```
    pub fn at(mut self, at: SystemTime) -> Self {
        self.not_before = Some(at);
        self
    }
}

/// Why [`schedule`] did not schedule a child.
///
/// ```no_run
/// use waft_sdk::{Child, Error, ScheduleError};
/// match waft_sdk::schedule(Child::new("thumbnail")) {
///     Ok(id) => waft_sdk::info!("scheduled {id}"),
///     Err(ScheduleError::Invalid(why)) => return Err(Error::fatal(why)),
///     Err(other) => return Err(Error::retriable(other.to_string())),
/// }
/// # Ok::<(), Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScheduleError {
    /// The request is wrong (unknown lambda, invalid priority...); retrying
    /// will not help.
    Invalid(String),
    /// The execution lost its lease; stop without further side effects.
    LeaseLost(LeaseLost),
    /// The platform could not take the request now; a retry may succeed.
    Unavailable(String),
}

impl std::fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Invalid(why) => write!(f, "invalid child task: {why}"),
            Self::LeaseLost(lost) => lost.fmt(f),
            Self::Unavailable(why) => write!(f, "scheduling unavailable: {why}"),
        }
    }
}

impl std::error::Error for ScheduleError {}

/// Schedules a child task, linked to the running task as its parent.
///
/// ```no_run
/// let id = waft_sdk::schedule(waft_sdk::Child::new("thumbnail").payload(b"img-42".to_vec()))?;
/// waft_sdk::info!("scheduled {id}");
/// # Ok::<(), waft_sdk::ScheduleError>(())
/// ```
pub fn schedule(child: Child) -> Result<TaskId, ScheduleError> {
    let not_before = child
        .not_before
        .map(|at| match at.duration_since(UNIX_EPOCH) {
            Ok(after) => i64::try_from(after.as_millis()).unwrap_or(i64::MAX),
            Err(before) => -i64::try_from(before.duration().as_millis()).unwrap_or(i64::MAX),
        });
    let request = raw::ChildTask {
        lambda: child.lambda,
        payload: child.payload,
        collection: child.collection,
        priority: child.priority,
        not_before,
    };
    raw::schedule(&request).map(TaskId).map_err(|e| match e {
        raw::ScheduleError::Invalid(why) => ScheduleError::Invalid(why),
        raw::ScheduleError::LeaseLost(lost) => ScheduleError::LeaseLost(LeaseLost {
            reason: lost.reason,
        }),
        raw::ScheduleError::Unavailable(why) => ScheduleError::Unavailable(why),
    })
}
