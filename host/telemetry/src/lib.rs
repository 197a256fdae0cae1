//! Waft's traces: a task's path from `Schedule` through the store, the
//! queue, the claim and each execution to its outbound requests, as spans
//! of one distributed trace, exported over OTLP/gRPC.
//!
//! The spans themselves are ordinary `tracing` spans made where the work
//! happens (the roles in `waft-services`, the outbound sender in
//! `waft-runtime`); this crate is the one place that knows they become
//! OpenTelemetry spans:
//!
//! - [`propagate`] carries a span's W3C context across processes, as the
//!   [`TraceContext`](waft_core::TraceContext) a task keeps in the store,
//!   its queue message and its claim, and as the `traceparent` header of
//!   an outbound request;
//! - [`export`] builds the `tracing` layer that turns spans into
//!   OpenTelemetry spans and the OTLP exporter that sends them, from the
//!   node's `[otel]` section ([`OtelConfig`]).
//!
//! Off by default: without an endpoint no layer is installed, the spans'
//! callsites are disabled (their level is above the log filter's), and the
//! propagation helpers find no OpenTelemetry context and do nothing.

pub mod config;
pub mod export;
pub mod propagate;

pub use config::OtelConfig;
pub use export::{Telemetry, TelemetryError};
pub use propagate::{context_of, inject, set_parent};

/// The targets whose spans are exported: Waft's own crates. Others (tonic,
/// h2, hyper) are left out, not least because the exporter's own calls
/// would be traced and exported in turn.
pub const TARGET_PREFIX: &str = "waft";
