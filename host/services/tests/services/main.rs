//! The integration tests of Waft's services, in one test binary: each
//! module below was a binary of its own, and linking wasmtime, sqlx and
//! tonic into each took longer than running them. Run them with
//! `cargo test -p waft-services --test services`, one module with
//! `cargo test -p waft-services --test services MODULE::`.
//!
//! - [`carried`]: what crosses between Waft's processes, over the real gRPC
//!   servers of `waft-api` and the clients of `waft-client`.
//! - [`children`]: the cap on the children one execution may schedule, with
//!   a real Executor running the `greedy` sample over the real Frontend and
//!   HSC on a SQLite file.
//! - [`consumer`]: the Store Consumer on the embedded backends (a SQLite
//!   file, in-process queues): due tasks reach the right queue, immediate
//!   ones without waiting for a tick, and a failed send loses nothing.
//! - [`controller`]: the Controller on the embedded backends: highest
//!   priority first from bounded per-priority buffers, claims before
//!   handing out, refused claims never handed out; a queue polled when the
//!   consumer fills it or the sweep finds a backlog in it.
//! - [`deploy`]: what a deploy hands the executors: the component compiled
//!   once, by the Frontend, and word of the deploy the moment it is stored.
//! - [`executor`]: the Executor against a Controller that hands its work
//!   out late: the claim is made when the request arrives, so its first
//!   fence counts from the request.
//! - [`history`]: the task history as the roles keep it, on a SQLite store.
//! - [`journal_model`]: the generated test of the durable journal's rules,
//!   random programs of the `script` sample held against a reference model.
//! - [`journal_pages`]: a task's journal as the Frontend answers people and
//!   local replays, on SQLite and on Postgres: bounded pages, every secret
//!   masked.
//! - [`notes`]: a heartbeat's progress note is a few words for people, not
//!   a data channel.
//! - [`pruner`]: the pruner on a SQLite store: it deletes what is past its
//!   retention in bounded batches until none is left, one holder at a time.
//! - [`secrets`]: the Frontend's side of secrets: refused input, and nothing
//!   in clear past it.
//! - [`watchdog`]: the heartbeat watchdog, on a paused clock: it stops an
//!   execution after three failed heartbeats or a lost lease, and never
//!   stops a healthy one.
//!
//! The modules share one process. Process-wide state they read — the
//! metrics registry of `waft_services::metrics` — is counted under lambda
//! names no other module uses, so concurrent tests cannot add to what a
//! test asserts.

mod carried;
mod children;
mod consumer;
mod controller;
mod deploy;
mod executor;
mod history;
mod journal_model;
mod journal_pages;
mod notes;
mod pruner;
mod secrets;
mod support;
mod watchdog;
