//! The OTLP export: a tracer provider whose batch processor sends spans to
//! the configured collector, and the `tracing` layer that feeds it.
//!
//! Two constraints shape it. The exporter's gRPC channel runs on the Tokio
//! runtime current when it is built, so a process starts its telemetry
//! inside the runtime that serves it and shuts it down before that runtime
//! ends. And the batch processor sends from its own thread, blocking:
//! [`Telemetry::shutdown`] waits for it on a blocking thread, so the last
//! spans leave before the process does.

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracerProvider,
};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;

use crate::{OtelConfig, TARGET_PREFIX};

/// How long an export may take before it is given up.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why traces cannot be exported.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("otel: {0}")]
    Config(String),
    #[error("otel: cannot build the OTLP exporter for {endpoint}: {reason}")]
    Exporter { endpoint: String, reason: String },
}

/// A running export; shut it down before the runtime ends.
#[derive(Clone)]
pub struct Telemetry {
    provider: SdkTracerProvider,
}

impl Telemetry {
    /// Starts exporting to `config.endpoint`; `None` when none is set.
    /// Must be called within a Tokio runtime, which must outlive it.
    pub fn start(config: &OtelConfig) -> Result<Option<Self>, TelemetryError> {
        config.validate().map_err(TelemetryError::Config)?;
        let Some(endpoint) = &config.endpoint else {
            return Ok(None);
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| TelemetryError::Exporter {
                endpoint: endpoint.clone(),
                reason: e.to_string(),
            })?;
        let mut batch = BatchConfigBuilder::default();
        if let Some(delay) = config.batch_delay {
            batch = batch.with_scheduled_delay(delay);
        }
        let processor = BatchSpanProcessor::builder(exporter)
            .with_batch_config(batch.build())
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                config.sampling_ratio,
            ))))
            .with_resource(
                Resource::builder()
                    .with_service_name(config.service_name.clone())
                    .build(),
            )
            .build();
        Ok(Some(Self { provider }))
    }

    /// The layer that makes Waft's spans OpenTelemetry spans, whatever the
    /// log filter says.
    pub fn layer<S>(&self) -> impl Layer<S> + use<S>
    where
        S: tracing::Subscriber + for<'span> LookupSpan<'span>,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer("waft"))
            .with_location(false)
            .with_threads(false)
            .with_filter(Targets::new().with_target(TARGET_PREFIX, tracing::Level::DEBUG))
    }

    /// Sends what is buffered and stops the export; waits on a blocking
    /// thread, as the batch processor's sends block.
    pub async fn shutdown(self) {
        let provider = self.provider;
        let done = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        if let Ok(Err(error)) = done {
            tracing::warn!(%error, "otel: the last spans may not have been exported");
        }
    }
}
