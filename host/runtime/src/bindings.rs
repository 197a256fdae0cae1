//! Host bindings of the `waft:lambda` world; the one place `bindgen!` runs.

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "waft:lambda/lambda@0.1.0",
    imports: {
        "waft:lambda/host.log": trappable,
        default: async | trappable,
    },
    exports: { default: async },
});
