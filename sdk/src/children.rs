//! Chaining (`waft:lambda/children`): child tasks a running lambda
//! schedules, linked to it as their parent.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::bindings::waft::lambda::children as raw;
use crate::{Error, LeaseLost};

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
    key: Option<String>,
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
            key: None,
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

    /// Gives the child a key within its lambda (a customer, an account, a
    /// document: 1 to 255 bytes of any text), which its lambda's limits per
    /// key count by.
    ///
    /// ```no_run
    /// let child = waft_sdk::Child::new("sync-account").key("customer-42");
    /// ```
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
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
/// Its id is the same in every attempt of the running task. The platform
/// may write the child shortly after this returns (a fan-out's children are
/// written in batches), but always before anything the task does next can
/// be seen outside: an outbound request, a wait for its children, its
/// outcome.
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
    let scheduled = match &child.key {
        None => raw::schedule(&request),
        Some(key) => raw::schedule_keyed(&request, key),
    };
    scheduled.map(TaskId).map_err(|e| match e {
        raw::ScheduleError::Invalid(why) => ScheduleError::Invalid(why),
        raw::ScheduleError::LeaseLost(lost) => ScheduleError::LeaseLost(LeaseLost {
            reason: lost.reason,
        }),
        raw::ScheduleError::Unavailable(why) => ScheduleError::Unavailable(why),
    })
}

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChildStatus {
    /// It returned its output.
    Success,
    /// It failed for good.
    FatalFailure,
    /// Its attempts ran out: a dead letter.
    Dead,
    /// A drop gate ended it.
    Dropped,
    /// A client cancelled it.
    Cancelled,
}

/// A child's end, as [`wait_all`] returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildEnd {
    /// The child.
    pub id: TaskId,
    /// How it ended.
    pub status: ChildStatus,
    /// What it returned, when it succeeded with an output.
    pub output: Option<Vec<u8>>,
    /// Why it failed, when it did.
    pub error: Option<String>,
}

impl ChildEnd {
    /// Whether the child succeeded.
    pub fn succeeded(&self) -> bool {
        self.status == ChildStatus::Success
    }

    /// The child's output as JSON.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, Error> {
        let output = self.output.as_deref().unwrap_or_default();
        serde_json::from_slice(output)
            .map_err(|e| Error::fatal(format!("the output of child {}: {e}", self.id)))
    }
}

/// Waits until every task of `ids` — children this task [`schedule`]d —
/// has ended, and returns each one's end, in the order of `ids` (a
/// fan-in).
///
/// Durable: a wait that does not end within the executor's `suspend_after`
/// (one second by default) **suspends** the task, as [`sleep`](crate::sleep)
/// does: no instance, lease or executor slot is held until the last child
/// ends; then the task resumes by replaying its journal, and this call
/// returns. What it returned is journaled, so a retry gets the same ends.
/// A dead letter counts as ended (its status says so). An id that is not a
/// child of this task stops the lambda with why.
///
/// ```no_run
/// use waft_sdk::{Child, children};
/// let ids = (0..100)
///     .map(|n| waft_sdk::schedule(Child::new("resize").payload(vec![n])))
///     .collect::<Result<Vec<_>, _>>()?;
/// let ends = children::wait_all(&ids);
/// let failed = ends.iter().filter(|end| !end.succeeded()).count();
/// waft_sdk::info!("{failed} of {} failed", ends.len());
/// # Ok::<(), waft_sdk::ScheduleError>(())
/// ```
pub fn wait_all(ids: &[TaskId]) -> Vec<ChildEnd> {
    let ids: Vec<String> = ids.iter().map(|id| id.0.clone()).collect();
    raw::wait_all(&ids)
        .into_iter()
        .map(|end| ChildEnd {
            id: TaskId(end.id),
            status: match end.status {
                raw::ChildStatus::Success => ChildStatus::Success,
                raw::ChildStatus::FatalFailure => ChildStatus::FatalFailure,
                raw::ChildStatus::Dead => ChildStatus::Dead,
                raw::ChildStatus::Dropped => ChildStatus::Dropped,
                raw::ChildStatus::Cancelled => ChildStatus::Cancelled,
            },
            output: end.output,
            error: end.error,
        })
        .collect()
}
