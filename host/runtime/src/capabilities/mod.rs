//! What a running lambda can ask of its host, one module per capability of
//! the contract's current version (`wit/lambda.wit`):
//!
//! - [`log`]: records in the task's log;
//! - [`heartbeat`]: liveness, answered by the platform's [`TaskHost`](crate::TaskHost);
//! - [`children`]: child tasks, scheduled through the same, and [`fan_in`]:
//!   waits for them to end;
//! - outbound HTTP (`wasi:http/outgoing-handler`): the [`outbound`](crate::outbound)
//!   module, behind the lambda's allow-list;
//! - [`config`] (`wasi:config/store`): the lambda's variables and secrets;
//! - [`signals`]: waits for what clients send the task, through the same
//!   [`TaskHost`](crate::TaskHost).
//!
//! Every call of a stopped execution fails, and so traps the guest: nothing
//! a lambda asks for happens after its kill switch is thrown.

mod children;
mod config;
mod fan_in;
mod heartbeat;
mod log;
mod signals;

pub(crate) use signals::Taken;

use crate::Unread;
use crate::contract::current::wit::types;
use crate::run::HostState;

/// Why an execution waiting in `call` for its task's `what` stops, when
/// the platform would not tell it.
fn stopped(unread: Unread, call: &str, what: &str) -> wasmtime::Error {
    wasmtime::Error::msg(match unread {
        Unread::LeaseLost(reason) => format!("execution stopped: lease lost: {reason}"),
        Unread::Invalid(why) => format!("{call}: {why}"),
        Unread::Unavailable(why) => format!("the task's {what} could not be read: {why}"),
    })
}

impl types::Host for HostState {}
