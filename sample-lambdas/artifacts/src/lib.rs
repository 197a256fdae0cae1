//! Paths of the sample lambdas, built for `wasm32-wasip2` by this crate's
//! build script. Tests depend on this crate instead of on files that may or
//! may not have been built.

include!(concat!(env!("OUT_DIR"), "/samples.rs"));
