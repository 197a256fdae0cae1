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

use crate::contract::current::wit::types;
use crate::run::HostState;

impl types::Host for HostState {}
