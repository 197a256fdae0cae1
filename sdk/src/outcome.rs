//! How a task ends, and what handler return types mean.

use std::time::Duration;

use crate::__private::RawOutcome;
use crate::Error;
use crate::bindings::waft::lambda::types::RetriableFailure;

/// How a task ended, as the lambda sees it.
///
/// A crash, a limit breach or a lost lease is not an outcome: the host
/// reports those itself.
///
/// ```
/// use waft_sdk::Outcome;
/// let done = Outcome::success();
/// let later = Outcome::retry("database busy");
/// let never = Outcome::fatal("no such account");
/// assert!(done.is_success() && !later.is_success() && !never.is_success());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Done, with optional output bytes.
    Success(Option<Vec<u8>>),
    /// Not done; retry within the lambda's attempt budget.
    Retry {
        /// What went wrong.
        message: String,
        /// Run again no sooner than this; the lambda's backoff decides if absent.
        after: Option<Duration>,
    },
    /// Not done and never will be.
    Fatal(String),
}

impl Outcome {
    /// Done, no output.
    ///
    /// ```
    /// assert_eq!(waft_sdk::Outcome::success(), waft_sdk::Outcome::Success(None));
    /// ```
    pub fn success() -> Self {
        Self::Success(None)
    }

    /// Done, with output bytes.
    ///
    /// ```
    /// let out = waft_sdk::Outcome::success_with(b"42".to_vec());
    /// ```
    pub fn success_with(output: impl Into<Vec<u8>>) -> Self {
        Self::Success(Some(output.into()))
    }

    /// Done, with `value` serialised as JSON for output.
    ///
    /// ```
    /// let out = waft_sdk::Outcome::json(&serde_json::json!({ "rows": 3 }))?;
    /// # Ok::<(), waft_sdk::Error>(())
    /// ```
    pub fn json<T: serde::Serialize + ?Sized>(value: &T) -> Result<Self, Error> {
        serde_json::to_vec(value)
            .map(|bytes| Self::Success(Some(bytes)))
            .map_err(|e| Error::fatal(format!("cannot serialise the output: {e}")))
    }

    /// A retriable failure; the lambda's backoff decides when.
    ///
    /// ```
    /// let out = waft_sdk::Outcome::retry("upstream timed out");
    /// ```
    pub fn retry(message: impl Into<String>) -> Self {
        Self::Retry {
            message: message.into(),
            after: None,
        }
    }

    /// A retriable failure, to run again no sooner than `after`.
    ///
    /// ```
    /// let out = waft_sdk::Outcome::retry_after("rate limited", std::time::Duration::from_secs(10));
    /// ```
    pub fn retry_after(message: impl Into<String>, after: Duration) -> Self {
        Self::Retry {
            message: message.into(),
            after: Some(after),
        }
    }

    /// A failure no retry can fix.
    ///
    /// ```
    /// let out = waft_sdk::Outcome::fatal("malformed address");
    /// ```
    pub fn fatal(message: impl Into<String>) -> Self {
        Self::Fatal(message.into())
    }

    /// Whether this is [`Outcome::Success`].
    ///
    /// ```
    /// assert!(waft_sdk::Outcome::success().is_success());
    /// ```
    pub fn is_success(&self) -> bool {
        matches!(self, Self::Success(_))
    }

    pub(crate) fn into_raw(self) -> RawOutcome {
        match self {
            Self::Success(output) => RawOutcome::Success(output),
            Self::Retry { message, after } => RawOutcome::Retriable(RetriableFailure {
                message,
                retry_after_ms: after.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            }),
            Self::Fatal(message) => RawOutcome::Fatal(message),
        }
    }
}

impl From<Error> for Outcome {
    fn from(error: Error) -> Self {
        if error.is_retriable() {
            Self::Retry {
                message: error.message().to_owned(),
                after: error.retry_after_delay(),
            }
        } else {
            Self::Fatal(error.message().to_owned())
        }
    }
}

/// What a `#[lambda]` function may return.
///
/// ```
/// use waft_sdk::{IntoOutcome, Outcome, Error};
/// assert!(Ok::<(), Error>(()).into_outcome().is_success());
/// assert!(!Err::<Outcome, _>(Error::fatal("no")).into_outcome().is_success());
/// ```
#[diagnostic::on_unimplemented(
    message = "a lambda handler cannot return `{Self}`",
    label = "the handler's return type",
    note = "return an `Outcome`, or a `Result<Outcome, E>`, `Result<(), E>` or `Result<Vec<u8>, E>` where `E: Into<waft_sdk::Error>`"
)]
pub trait IntoOutcome {
    /// Converts the handler's result into the task's outcome.
    fn into_outcome(self) -> Outcome;
}

impl IntoOutcome for Outcome {
    fn into_outcome(self) -> Outcome {
        self
    }
}

impl<E: Into<Error>> IntoOutcome for Result<Outcome, E> {
    fn into_outcome(self) -> Outcome {
        self.unwrap_or_else(|e| e.into().into())
    }
}

impl<E: Into<Error>> IntoOutcome for Result<(), E> {
    fn into_outcome(self) -> Outcome {
        match self {
            Ok(()) => Outcome::success(),
            Err(e) => e.into().into(),
        }
    }
}

impl<E: Into<Error>> IntoOutcome for Result<Vec<u8>, E> {
    fn into_outcome(self) -> Outcome {
        match self {
            Ok(output) => Outcome::success_with(output),
            Err(e) => e.into().into(),
        }
    }
}
