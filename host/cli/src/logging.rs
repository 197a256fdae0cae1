//! The process's logs and traces: one `tracing` subscriber with two
//! layers, each with its own filter — the log on stderr, filtered by
//! `WAFT_LOG` (default `warn`), and, when `[otel]` names a collector,
//! Waft's spans as OpenTelemetry spans, whatever the log's filter.
//!
//! `waft dev` and `waft serve` install it only once their configuration
//! is read and their runtime runs, since the exporter needs both; what is
//! logged before (a configuration's warnings) goes to a log-only
//! subscriber for that time.

use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use waft_telemetry::Telemetry;

/// The log's layer: stderr, filtered by `WAFT_LOG`.
fn log_layer<S>() -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    let filter = tracing_subscriber::EnvFilter::try_from_env("WAFT_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_filter(filter)
}

/// Installs the process's subscriber: the log, and the spans' export when
/// `telemetry` runs.
pub fn init(telemetry: Option<&Telemetry>) {
    tracing_subscriber::registry()
        .with(log_layer())
        .with(telemetry.map(Telemetry::layer))
        .init();
}

/// Runs `body` with the log alone, before [`init`].
pub fn while_starting<T>(body: impl FnOnce() -> T) -> T {
    let subscriber = tracing_subscriber::registry().with(log_layer());
    tracing::subscriber::with_default(subscriber, body)
}
