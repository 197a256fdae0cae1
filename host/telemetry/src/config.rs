//! The `[otel]` section of a node's configuration: where traces go, under
//! which service name, and what share of new traces is recorded.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// Trace export; off unless an endpoint is set.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OtelConfig {
    /// The OTLP/gRPC collector, `http://host:4317` (default none: no traces
    /// are exported). When unset, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` is used if present.
    pub endpoint: Option<String>,
    /// The `service.name` of the exported spans (default `waft`).
    pub service_name: String,
    /// The share of traces started here that are recorded, 0.0 to 1.0
    /// (default 1.0). A trace a client started keeps its own decision
    /// (the `sampled` flag of its `traceparent`).
    #[serde(deserialize_with = "ratio")]
    pub sampling_ratio: f64,
    /// How long spans wait to be sent in a batch (default 5 s; not in the
    /// file: `OTEL_BSP_SCHEDULE_DELAY`, in milliseconds, sets it).
    #[serde(skip)]
    pub batch_delay: Option<Duration>,
}

impl Default for OtelConfig {
    fn default() -> Self {
        Self {
            endpoint: None,
            service_name: "waft".into(),
            sampling_ratio: 1.0,
            batch_delay: None,
        }
    }
}

impl OtelConfig {
    /// Refuses settings that cannot work.
    pub fn validate(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.sampling_ratio) {
            return Err(format!(
                "sampling_ratio is {}; it is a share, from 0.0 to 1.0",
                self.sampling_ratio
            ));
        }
        if let Some(endpoint) = &self.endpoint
            && !(endpoint.starts_with("http://") || endpoint.starts_with("https://"))
        {
            return Err(format!(
                "endpoint {endpoint:?} must be an http:// or https:// URL (OTLP over gRPC)"
            ));
        }
        if self.service_name.trim().is_empty() {
            return Err("service_name must not be empty".into());
        }
        Ok(())
    }

    /// Fills what the file left out from the standard OpenTelemetry
    /// variables among `env`: the endpoint and the batch delay.
    pub fn apply_standard_env(&mut self, env: &[(String, String)]) {
        let var = |name: &str| {
            env.iter()
                .find(|(key, value)| key == name && !value.trim().is_empty())
                .map(|(_, value)| value.trim().to_owned())
        };
        if self.endpoint.is_none() {
            self.endpoint = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                .or_else(|| var("OTEL_EXPORTER_OTLP_ENDPOINT"));
        }
        if self.batch_delay.is_none() {
            self.batch_delay = var("OTEL_BSP_SCHEDULE_DELAY")
                .and_then(|ms| ms.parse().ok())
                .map(Duration::from_millis);
        }
    }
}

/// A ratio written as a number, or as a string (as a `WAFT_*` variable
/// gives it).
fn ratio<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Ratio {
        Number(f64),
        Text(String),
    }
    match Ratio::deserialize(deserializer)? {
        Ratio::Number(number) => Ok(number),
        Ratio::Text(text) => text
            .trim()
            .parse()
            .map_err(|_| serde::de::Error::custom(format!("{text:?} is not a number"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_standard_variables_fill_what_the_file_left_out() {
        let env = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let mut config = OtelConfig::default();
        config.apply_standard_env(&env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
            ("OTEL_BSP_SCHEDULE_DELAY", "200"),
        ]));
        assert_eq!(config.endpoint.as_deref(), Some("http://collector:4317"));
        assert_eq!(config.batch_delay, Some(Duration::from_millis(200)));

        let mut set = OtelConfig {
            endpoint: Some("http://mine:4317".into()),
            ..OtelConfig::default()
        };
        set.apply_standard_env(&env(&[(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "http://other:4317",
        )]));
        assert_eq!(set.endpoint.as_deref(), Some("http://mine:4317"));
    }

    #[test]
    fn bad_settings_are_refused() {
        for bad in [
            OtelConfig {
                sampling_ratio: 1.5,
                ..OtelConfig::default()
            },
            OtelConfig {
                endpoint: Some("collector:4317".into()),
                ..OtelConfig::default()
            },
            OtelConfig {
                service_name: " ".into(),
                ..OtelConfig::default()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        assert!(OtelConfig::default().validate().is_ok());
    }
}
