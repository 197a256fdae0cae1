//! `waft:lambda@0.1.0`: one `host` interface for every host call. Its calls
//! are answered by the current interfaces' implementations, its tasks and
//! outcomes converted to and from theirs.

use super::current::wit::{children, heartbeat, log, types as current};
use crate::run::HostState;

wasmtime::component::bindgen!({
    path: "../../wit/released/lambda-0.1.0",
    world: "waft:lambda/lambda@0.1.0",
    imports: {
        "waft:lambda/host.log": trappable,
        default: async | trappable,
    },
    exports: { default: async },
});

use waft::lambda::{host, types};

/// The handler export of a 0.1.0 lambda.
pub(crate) const HANDLER_EXPORT: &str = "waft:lambda/handler@0.1.0";

/// Runs `task` through an instance's handler, converted both ways.
pub(crate) async fn handle(
    instance: &Lambda,
    store: &mut wasmtime::Store<HostState>,
    task: current::Task,
) -> wasmtime::Result<current::Outcome> {
    let answer = instance
        .waft_lambda_handler()
        .call_handle(store, &self::task(task))
        .await?;
    Ok(outcome(answer))
}

fn task(task: current::Task) -> types::Task {
    types::Task {
        id: task.id,
        lambda: task.lambda,
        collection: task.collection,
        priority: task.priority,
        attempt: task.attempt,
        scheduled_at: task.scheduled_at,
        payload: task.payload,
    }
}

fn outcome(outcome: types::Outcome) -> current::Outcome {
    match outcome {
        types::Outcome::Success(output) => current::Outcome::Success(output),
        types::Outcome::Retriable(failure) => {
            current::Outcome::Retriable(current::RetriableFailure {
                message: failure.message,
                retry_after_ms: failure.retry_after_ms,
            })
        }
        types::Outcome::Fatal(message) => current::Outcome::Fatal(message),
    }
}

impl types::Host for HostState {}

impl host::Host for HostState {
    async fn heartbeat(
        &mut self,
        progress: Option<String>,
    ) -> wasmtime::Result<Result<(), host::LeaseLost>> {
        let reply = heartbeat::Host::beat(self, progress).await?;
        Ok(reply.map_err(|lost| host::LeaseLost {
            reason: lost.reason,
        }))
    }

    fn log(
        &mut self,
        level: host::Level,
        message: String,
        fields: Vec<(String, String)>,
    ) -> wasmtime::Result<()> {
        let level = match level {
            host::Level::Trace => log::Level::Trace,
            host::Level::Debug => log::Level::Debug,
            host::Level::Info => log::Level::Info,
            host::Level::Warn => log::Level::Warn,
            host::Level::Error => log::Level::Error,
        };
        log::Host::log(self, level, message, fields)
    }

    async fn schedule(
        &mut self,
        child: host::ChildTask,
    ) -> wasmtime::Result<Result<String, host::ScheduleError>> {
        let child = children::ChildTask {
            lambda: child.lambda,
            payload: child.payload,
            collection: child.collection,
            priority: child.priority,
            not_before: child.not_before,
        };
        let reply = children::Host::schedule(self, child).await?;
        Ok(reply.map_err(|error| match error {
            children::ScheduleError::Invalid(why) => host::ScheduleError::Invalid(why),
            children::ScheduleError::LeaseLost(lost) => {
                host::ScheduleError::LeaseLost(host::LeaseLost {
                    reason: lost.reason,
                })
            }
            children::ScheduleError::Unavailable(why) => host::ScheduleError::Unavailable(why),
        }))
    }
}
