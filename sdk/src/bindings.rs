//! The generated WebAssembly glue of the `lambda` world of `wit/lambda.wit`,
//! whichever version of `waft:lambda` that file holds (the world is named
//! without its package, so a new contract version needs no edit here); the
//! only place that names wit-bindgen. A lambda's component imports only the
//! interfaces its code calls.

#![allow(missing_docs, reason = "generated code")]

wit_bindgen::generate!({
    path: "../wit",
    world: "lambda",
    pub_export_macro: true,
    export_macro_name: "export",
    default_bindings_module: "::waft_sdk::__private::bindings",
    runtime_path: "::waft_sdk::__private::bindings::wit_bindgen_rt",
    with: { "wasi:config/store@0.2.0-rc.1": generate },
});

#[doc(hidden)]
pub use wit_bindgen::rt as wit_bindgen_rt;
