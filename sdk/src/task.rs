//! The task a lambda is asked to run.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::__private::RawTask;
use crate::Error;

/// One unit of work: who it is for and what it carries.
///
/// ```
/// let task = waft_sdk::Task::for_test("greet", br#"{"name":"Ada"}"#.to_vec());
/// assert_eq!(task.lambda(), "greet");
/// assert_eq!(task.attempt(), 1);
/// ```
#[derive(Debug, Clone)]
pub struct Task {
    id: String,
    lambda: String,
    collection: String,
    priority: u8,
    attempt: u32,
    scheduled_at: SystemTime,
    payload: Vec<u8>,
}

impl Task {
    pub(crate) fn from_raw(raw: RawTask) -> Self {
        let scheduled_at = if raw.scheduled_at >= 0 {
            UNIX_EPOCH + Duration::from_millis(raw.scheduled_at.unsigned_abs())
        } else {
            UNIX_EPOCH - Duration::from_millis(raw.scheduled_at.unsigned_abs())
        };
        Self {
            id: raw.id,
            lambda: raw.lambda,
            collection: raw.collection,
            priority: raw.priority,
            attempt: raw.attempt,
            scheduled_at,
            payload: raw.payload,
        }
    }

    /// A task built by hand, for unit tests of a handler's logic: first
    /// attempt, collection `default`, priority 0, due now.
    ///
    /// ```
    /// let task = waft_sdk::Task::for_test("echo", b"hi".to_vec());
    /// assert_eq!(task.payload(), b"hi");
    /// ```
    pub fn for_test(lambda: &str, payload: Vec<u8>) -> Self {
        Self {
            id: "test-task".to_owned(),
            lambda: lambda.to_owned(),
            collection: "default".to_owned(),
            priority: 0,
            attempt: 1,
            scheduled_at: SystemTime::now(),
            payload,
        }
    }

    /// The same task on another attempt (for tests of retry logic).
    ///
    /// ```
    /// let task = waft_sdk::Task::for_test("flaky", vec![]).with_attempt(3);
    /// assert_eq!(task.attempt(), 3);
    /// ```
    pub fn with_attempt(mut self, attempt: u32) -> Self {
        self.attempt = attempt;
        self
    }

    /// The task's platform-wide id.
    ///
    /// ```
    /// # let task = waft_sdk::Task::for_test("x", vec![]);
    /// assert_eq!(task.id(), "test-task");
    /// ```
    pub fn id(&self) -> &str {
        &self.id
    }

    /// A key naming this task's work, the same on every attempt: what a
    /// service receiving the task's requests can deduplicate by. The
    /// [`http`](crate::http) client sends it, with the request's rank in the
    /// execution, as each request's `Idempotency-Key`.
    pub fn idempotency_key(&self) -> String {
        format!("waft-{}", self.id)
    }

    /// The lambda the task was scheduled for.
    ///
    /// ```
    /// # let task = waft_sdk::Task::for_test("resize", vec![]);
    /// assert_eq!(task.lambda(), "resize");
    /// ```
    pub fn lambda(&self) -> &str {
        &self.lambda
    }

    /// The collection the task belongs to (`default` unless scheduled in one).
    ///
    /// ```
    /// # let task = waft_sdk::Task::for_test("x", vec![]);
    /// assert_eq!(task.collection(), "default");
    /// ```
    pub fn collection(&self) -> &str {
        &self.collection
    }

    /// The task's priority level; higher runs first.
    ///
    /// ```
    /// # let task = waft_sdk::Task::for_test("x", vec![]);
    /// assert_eq!(task.priority(), 0);
    /// ```
    pub fn priority(&self) -> u8 {
        self.priority
    }

    /// 1 on the first run, incremented by each retry.
    ///
    /// ```
    /// # let task = waft_sdk::Task::for_test("x", vec![]);
    /// assert_eq!(task.attempt(), 1);
    /// ```
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// When the task was due to run.
    ///
    /// ```
    /// # let task = waft_sdk::Task::for_test("x", vec![]);
    /// let late = task.scheduled_at().elapsed().unwrap_or_default();
    /// ```
    pub fn scheduled_at(&self) -> SystemTime {
        self.scheduled_at
    }

    /// The payload bytes.
    ///
    /// ```
    /// # let task = waft_sdk::Task::for_test("x", vec![1, 2]);
    /// assert_eq!(task.payload(), &[1, 2]);
    /// ```
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// Takes the payload out of the task without copying it.
    ///
    /// ```
    /// # let task = waft_sdk::Task::for_test("x", vec![7]);
    /// let bytes: Vec<u8> = task.into_payload();
    /// ```
    pub fn into_payload(self) -> Vec<u8> {
        self.payload
    }

    /// The payload as UTF-8 text; not UTF-8 is a fatal error (a retry would
    /// see the same bytes).
    ///
    /// ```
    /// # let task = waft_sdk::Task::for_test("x", b"hello".to_vec());
    /// assert_eq!(task.text()?, "hello");
    /// # Ok::<(), waft_sdk::Error>(())
    /// ```
    pub fn text(&self) -> Result<&str, Error> {
        std::str::from_utf8(&self.payload)
            .map_err(|e| Error::fatal(format!("payload is not UTF-8: {e}")))
    }

    /// The payload parsed as JSON; a payload that does not parse into `T` is
    /// a fatal error (a retry would see the same bytes).
    ///
    /// ```
    /// #[derive(serde::Deserialize)]
    /// struct Job { rows: u32 }
    /// # let task = waft_sdk::Task::for_test("x", br#"{"rows": 3}"#.to_vec());
    /// let job: Job = task.json()?;
    /// assert_eq!(job.rows, 3);
    /// # Ok::<(), waft_sdk::Error>(())
    /// ```
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, Error> {
        serde_json::from_slice(&self.payload)
            .map_err(|e| Error::fatal(format!("payload is not the expected JSON: {e}")))
    }
}
