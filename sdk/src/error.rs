//! The error type lambda code returns with `?`.

use std::time::Duration;

/// A failure of a task: retriable (the default) or fatal.
///
/// Any `std::error::Error` converts into a *retriable* `Error`, so `?` works
/// on I/O, parse and client errors alike: the platform retries within the
/// lambda's attempt budget and dead-letters the task when it runs out. Say
/// [`Error::fatal`] when retrying cannot help.
///
/// ```
/// use std::time::Duration;
/// use waft_sdk::Error;
///
/// let busy = Error::retriable("upstream busy").retry_after(Duration::from_secs(5));
/// let bad = Error::fatal("unknown customer 42");
/// assert!(busy.is_retriable() && !bad.is_retriable());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    message: String,
    fatal: bool,
    retry_after: Option<Duration>,
}

impl Error {
    /// A failure worth retrying.
    ///
    /// ```
    /// let e = waft_sdk::Error::retriable("connection reset");
    /// assert_eq!(e.message(), "connection reset");
    /// ```
    pub fn retriable(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            fatal: false,
            retry_after: None,
        }
    }

    /// A failure no retry can fix; the task ends as failed.
    ///
    /// ```
    /// let e = waft_sdk::Error::fatal("payload names no user");
    /// assert!(!e.is_retriable());
    /// ```
    pub fn fatal(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            fatal: true,
            retry_after: None,
        }
    }

    /// Asks for the next attempt no sooner than `delay` from now (retriable
    /// errors only; ignored on fatal ones).
    ///
    /// ```
    /// let e = waft_sdk::Error::retriable("rate limited").retry_after(std::time::Duration::from_secs(30));
    /// assert_eq!(e.retry_after_delay(), Some(std::time::Duration::from_secs(30)));
    /// ```
    pub fn retry_after(mut self, delay: Duration) -> Self {
        self.retry_after = Some(delay);
        self
    }

    /// The message shown in the task's status and dead-letter view.
    ///
    /// ```
    /// assert_eq!(waft_sdk::Error::fatal("no").message(), "no");
    /// ```
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether the platform will retry the task.
    ///
    /// ```
    /// assert!(waft_sdk::Error::retriable("later").is_retriable());
    /// ```
    pub fn is_retriable(&self) -> bool {
        !self.fatal
    }

    /// The delay asked for with [`Error::retry_after`].
    ///
    /// ```
    /// assert_eq!(waft_sdk::Error::retriable("x").retry_after_delay(), None);
    /// ```
    pub fn retry_after_delay(&self) -> Option<Duration> {
        self.retry_after
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = if self.fatal { "fatal" } else { "retriable" };
        write!(f, "{kind}: {}", self.message)
    }
}

/// `?` on any error type yields a retriable failure carrying its message
/// (with its chain of causes).
impl<E: std::error::Error> From<E> for Error {
    fn from(error: E) -> Self {
        let mut message = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        Self::retriable(message)
    }
}
