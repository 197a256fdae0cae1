//! `waft:lambda/children`: chaining. A lambda's child task goes to the
//! platform's [`TaskHost`](crate::TaskHost), which checks what the lambda
//! may schedule; a refusal is written to the task's log.
//!
//! Journaled (see `durable`): each child has its rank among the task's
//! children, replayed ones included, which its idempotency key carries, so
//! an attempt that schedules again a child an earlier one scheduled (its
//! entry lost with that attempt) gets the same child back. So a child's
//! entry need not be written before the lambda learns its id: it goes with
//! the journal's next write, and the host may write the child itself later
//! too (see [`TaskHost::settle`](crate::TaskHost::settle)).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::contract::current::wit::{children, types};
use crate::durable::{Outside, Step, digest, encode};
use crate::log::LogSource;
use crate::run::HostState;
use crate::{ChildRequest, ScheduleRejection};

const SCHEDULE: &str = "waft:lambda/children.schedule";

/// A refusal as the journal keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Refused {
    Invalid(String),
    Unavailable(String),
}

impl children::Host for HostState {
    async fn schedule(
        &mut self,
        child: children::ChildTask,
    ) -> wasmtime::Result<Result<String, children::ScheduleError>> {
        self.schedule_child(child, None).await
    }

    async fn schedule_keyed(
        &mut self,
        child: children::ChildTask,
        key: String,
    ) -> wasmtime::Result<Result<String, children::ScheduleError>> {
        self.schedule_child(child, Some(key)).await
    }

    async fn wait_all(&mut self, ids: Vec<String>) -> wasmtime::Result<Vec<children::ChildEnd>> {
        HostState::wait_all(self, ids).await
    }
}

impl HostState {
    /// Schedules a child, with its key when it has one; one journal entry
    /// either way (a keyed child's arguments hold its key, so a replay
    /// that asks for it unkeyed, or by another key, diverges).
    async fn schedule_child(
        &mut self,
        child: children::ChildTask,
        key: Option<String>,
    ) -> wasmtime::Result<Result<String, children::ScheduleError>> {
        self.ensure_running()?;
        let rank = self.children;
        self.children += 1;
        let arguments = (
            &child.lambda,
            &child.payload,
            &child.collection,
            child.priority,
            child.not_before,
        );
        let digest = match &key {
            None => digest(SCHEDULE, &arguments),
            Some(key) => digest(SCHEDULE, &(arguments, key)),
        };
        let ticket = match self.journal.call(SCHEDULE, &digest)? {
            Step::Replay { seq, answer } => {
                let answer: Result<String, Refused> =
                    self.journal.decode(seq, SCHEDULE, &answer)?;
                self.journal.replayed_outside(seq, outside(&answer));
                return Ok(answer.map_err(Refused::into_wit));
            }
            Step::Live(ticket) => ticket,
        };
        // Scheduling blocks the guest: waiting here for an earlier request
        // of the recorded journal whose body the guest has not finished
        // writing would never end, so a child does not wait (docs/durable.md, rule 3).
        let lambda = child.lambda.clone();
        let request = ChildRequest {
            lambda: child.lambda,
            payload: child.payload,
            collection: child.collection,
            priority: child.priority,
            not_before: child.not_before.map(from_unix_millis),
            key,
            rank,
        };
        let answer = match self.host.schedule(request).await {
            Ok(id) => Ok(id),
            Err(ScheduleRejection::Invalid(why)) => Err(Refused::Invalid(why)),
            Err(ScheduleRejection::Denied(why)) => {
                let note = format!("refused to schedule a child: {why}");
                self.log.record(LogSource::Waft, note, Vec::new());
                Err(Refused::Invalid(why))
            }
            Err(ScheduleRejection::Unavailable(why)) => Err(Refused::Unavailable(why)),
            // Nothing was scheduled, and the execution is over: no entry.
            Err(ScheduleRejection::LeaseLost(reason)) => {
                return Ok(Err(children::ScheduleError::LeaseLost(types::LeaseLost {
                    reason,
                })));
            }
        };
        let summary = match &answer {
            Ok(id) => format!("schedule({lambda}) → {id}"),
            Err(refused) => format!("schedule({lambda}) → refused: {refused:?}"),
        };
        self.journal
            .record(ticket, &digest, encode(&answer), summary, outside(&answer))?;
        Ok(answer.map_err(Refused::into_wit))
    }
}

/// A refusal for now failed; any other answer answered.
fn outside(answer: &Result<String, Refused>) -> Outside {
    match answer {
        Err(Refused::Unavailable(_)) => Outside::Failed,
        _ => Outside::Answered,
    }
}

impl Refused {
    fn into_wit(self) -> children::ScheduleError {
        match self {
            Refused::Invalid(why) => children::ScheduleError::Invalid(why),
            Refused::Unavailable(why) => children::ScheduleError::Unavailable(why),
        }
    }
}

fn from_unix_millis(ms: i64) -> SystemTime {
    if ms >= 0 {
        UNIX_EPOCH + Duration::from_millis(ms.unsigned_abs())
    } else {
        UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
    }
}
