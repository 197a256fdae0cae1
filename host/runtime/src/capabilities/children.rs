//! `waft:lambda/children`: chaining. A lambda's child task goes to the
//! platform's [`TaskHost`](crate::TaskHost), which checks what the lambda
//! may schedule; a refusal is written to the task's log.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::contract::current::wit::{children, types};
use crate::log::LogSource;
use crate::run::HostState;
use crate::{ChildRequest, ScheduleRejection};

impl children::Host for HostState {
    async fn schedule(
        &mut self,
        child: children::ChildTask,
    ) -> wasmtime::Result<Result<String, children::ScheduleError>> {
        self.ensure_running()?;
        let request = ChildRequest {
            lambda: child.lambda,
            payload: child.payload,
            collection: child.collection,
            priority: child.priority,
            not_before: child.not_before.map(from_unix_millis),
        };
        let reply = self.host.schedule(request).await;
        Ok(reply.map_err(|rejection| match rejection {
            ScheduleRejection::Invalid(why) => children::ScheduleError::Invalid(why),
            ScheduleRejection::Denied(why) => {
                let note = format!("refused to schedule a child: {why}");
                self.log.record(LogSource::Waft, note, Vec::new());
                children::ScheduleError::Invalid(why)
            }
            ScheduleRejection::LeaseLost(reason) => {
                children::ScheduleError::LeaseLost(types::LeaseLost { reason })
            }
            ScheduleRejection::Unavailable(why) => children::ScheduleError::Unavailable(why),
        }))
    }
}

fn from_unix_millis(ms: i64) -> SystemTime {
    if ms >= 0 {
        UNIX_EPOCH + Duration::from_millis(ms.unsigned_abs())
    } else {
        UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
    }
}
