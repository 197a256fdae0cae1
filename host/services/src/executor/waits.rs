//! What an execution waits for — the signals sent to its task, the states
//! of its children — read from the HSC under its lease.
//!
//! Apart from `host.rs` because a read is retried as a journal write is:
//! an unreachable HSC is asked again for as long as a journal write waits,
//! and what the store refuses is told apart from what the lambda asked
//! wrongly.

use waft_runtime::Unread;
use waft_store::Refusal;

use super::durable::{JournalFailure, JournalLink};
use super::host::ExecutionHost;
use crate::{ServiceError, ServiceResult};

/// What a read of what an execution waits for came to.
enum Read<T> {
    Answered(T),
    Refused(Refusal),
    Invalid(String),
}

impl ExecutionHost {
    /// What the execution waits for (its task's `what`), read from the
    /// HSC under its lease. An unreachable HSC is asked again, as for a
    /// journal write: a blip must not cost the task an attempt.
    pub(super) async fn read<T, F>(&self, what: &str, call: impl FnMut() -> F) -> Result<T, Unread>
    where
        F: Future<Output = ServiceResult<Result<T, Refusal>>>,
    {
        if let Some(reason) = self.kill.reason() {
            return Err(Unread::LeaseLost(reason.to_owned()));
        }
        let link = JournalLink {
            hsc: self.hsc.as_ref(),
            kill: &self.kill,
            patience: self.journal_patience,
        };
        let give_up_at = tokio::time::Instant::now() + self.journal_patience;
        let mut call = call;
        // A request the store finds wrong (a task that is not a child) is
        // the lambda's to hear, not one to ask again.
        let asked = link.retrying(give_up_at, || {
            let answer = call();
            async move {
                match answer.await {
                    Ok(Ok(answer)) => Ok(Read::Answered(answer)),
                    Ok(Err(refusal)) => Ok(Read::Refused(refusal)),
                    Err(ServiceError::InvalidArgument(why)) => Ok(Read::Invalid(why)),
                    Err(error) => Err(error),
                }
            }
        });
        match asked.await {
            Ok(Read::Answered(answer)) => Ok(answer),
            Ok(Read::Refused(refusal)) => Err(Unread::LeaseLost(format!(
                "the HSC refused task {}'s {what} ({refusal:?}): the lease is lost",
                self.task_id
            ))),
            Ok(Read::Invalid(why)) => Err(Unread::Invalid(why)),
            Err(JournalFailure::LeaseLost(reason)) => Err(Unread::LeaseLost(reason)),
            Err(JournalFailure::Failed(reason)) => Err(Unread::Unavailable(reason)),
        }
    }
}
