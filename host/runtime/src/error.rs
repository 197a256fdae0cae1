//! Errors of the runtime crate.

use std::path::PathBuf;
use std::time::Duration;

/// Why the runtime could not start.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("invalid runtime configuration: {0}")]
    Config(String),
    #[error("cannot create the WebAssembly engine: {0}")]
    Engine(wasmtime::Error),
    #[error("cannot link the host functions: {0}")]
    Linker(wasmtime::Error),
    #[error("cannot start the epoch thread, without which no deadline or kill stops a guest: {0}")]
    EpochThread(std::io::Error),
    #[error("cannot use the artifact cache at {path}: {source}")]
    Cache {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Why a `.wasm` file cannot run as a Waft lambda.
///
/// Each variant says what is wrong in terms a lambda author can act on.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("the file is empty")]
    Empty,
    #[error("not a WebAssembly file (it does not start with the \\0asm magic bytes)")]
    NotWasm,
    #[error(
        "this is a core WebAssembly module, not a component; build the lambda with \
         `cargo build --target wasm32-wasip2` (or wrap the module with `wasm-tools component new`)"
    )]
    CoreModule,
    #[error("not a valid WebAssembly component: {0}")]
    Invalid(String),
    #[error(
        "the component does not implement the waft:lambda world: it does not export \
         `{expected}` (its exports: {found})"
    )]
    MissingExport { expected: String, found: String },
    #[error(
        "the component's `{export}` export does not match its version of waft:lambda: {detail}"
    )]
    ExportMismatch { export: String, detail: String },
    #[error(
        "the component imports something Waft does not provide: {detail} \
         (a lambda may import the interfaces of waft:lambda, wasi:config/store, \
         wasi:http/outgoing-handler and WASI 0.2 only)"
    )]
    UnsupportedImport { detail: String },
    #[error("the component fails to instantiate: {0}")]
    Instantiation(String),
    #[error(
        "the component's start-up did not finish within {limit:?}; every task instantiates \
         its lambda anew, so do the work in the handler, not at start-up"
    )]
    SlowStartup { limit: Duration },
    #[error("the component's start-up exceeds the lambda's limits: {detail}")]
    LimitExceeded { detail: String },
    #[error("cannot cache the compiled component: {0}")]
    Cache(std::io::Error),
    #[error("the compiler stopped on this component without an answer: {0}")]
    CompilerStopped(String),
    #[error("the compiled artifact is refused: {0}")]
    ArtifactRefused(String),
}
