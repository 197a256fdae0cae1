//! `waft:lambda@0.2`, the current contract: one interface per capability.
//!
//! It binds the `lambda` world of `wit/lambda.wit`, whichever 0.2 release
//! that file holds: a release that only adds (an interface, a function) is
//! a new patch version, and components of the earlier ones link to it as
//! they are, by semver, with nothing here to change.

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "lambda",
    imports: {
        "waft:lambda/log.log": trappable,
        default: async | trappable,
    },
    exports: { default: async },
});

/// The generated interfaces.
pub(crate) use waft::lambda as wit;
pub(crate) use wit::types::{Outcome, Task};

/// The handler export of a 0.2 lambda (found in a component of any 0.2
/// release: the runtime looks exports up by semver).
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
