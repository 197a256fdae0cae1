//! `waft:lambda@0.2.0`, the current contract: one interface per capability.

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "waft:lambda/lambda@0.2.0",
    imports: {
        "waft:lambda/log.log": trappable,
        default: async | trappable,
    },
    exports: { default: async },
});

/// The generated interfaces.
pub(crate) use waft::lambda as wit;
pub(crate) use wit::types::{Outcome, Task};

/// The handler export of a 0.2.0 lambda.
pub(crate) const HANDLER_EXPORT: &str = "waft:lambda/handler@0.2.0";

/// Runs `task` through an instance's handler.
pub(crate) async fn handle(
    instance: &Lambda,
    store: &mut wasmtime::Store<crate::run::HostState>,
    task: &Task,
) -> wasmtime::Result<Outcome> {
    instance
        .waft_lambda_handler()
        .call_handle(store, task)
        .await
}
