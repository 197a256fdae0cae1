//! The integration tests of Waft's gRPC servers, in one test binary: each
//! module below was a binary of its own, and linking wasmtime, sqlx and
//! tonic into each took longer than running them. Run them with
//! `cargo test -p waft-api --test api`, one module with
//! `cargo test -p waft-api --test api MODULE::`.
//!
//! - [`cluster_only`]: who may call the Controller and the HSC: the
//!   installation's own processes, which present the cluster token, and no
//!   one else.
//! - [`frontend`]: the Frontend's gRPC adapter over a real Frontend on
//!   SQLite, called as the authentication layer leaves a call and through a
//!   real server with auth on.
//! - [`hosts`]: a real server on loopback, reached as a browser would reach
//!   it: the page, gRPC-web and plain gRPC answer only to the names the
//!   server goes by.
//! - [`journal`]: durable lambdas' journals over the wire, through a real
//!   server with auth on, over a real Frontend and HSC on SQLite.
//! - [`rights`]: every call of the Frontend's roles against every kind of
//!   caller, made twice, in process and over gRPC, with the verdict and the
//!   answer the same both ways.
//!
//! Each server listens on a port of its own that the system picks, so the
//! modules run side by side in one process.

mod cluster_only;
mod frontend;
mod hosts;
mod journal;
mod rights;
