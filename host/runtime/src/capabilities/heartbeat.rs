//! `waft:lambda/heartbeat`: a lambda says it is alive, and learns whether
//! its execution still holds the task's lease.

use crate::contract::v0_2::wit::{heartbeat, types};
use crate::run::HostState;

impl heartbeat::Host for HostState {
    async fn beat(
        &mut self,
        progress: Option<String>,
    ) -> wasmtime::Result<Result<(), types::LeaseLost>> {
        self.ensure_running()?;
        let reply = self.host.heartbeat(progress).await;
        Ok(reply.map_err(|lost| types::LeaseLost {
            reason: lost.reason,
        }))
    }
}
