//! What the roles count, for Prometheus.
//!
//! One process-wide set of metrics ([`metrics`]), recorded where things
//! happen (the Frontend counts scheduled tasks, the Store Consumer enqueued
//! ones and the backlog, the Executor executions) and served as text by
//! `waft-node` on its metrics port ([`encode`]). A process that runs
//! several roles (`waft dev`) reports all of them; in the distributed mode
//! each process reports its own and Prometheus sums them.
//!
//! Labels are the lambda and, where queues are concerned, the priority; an
//! execution's outcome or the limit it breached is a label of its own.

use std::sync::LazyLock;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// A lambda.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LambdaLabels {
    pub lambda: String,
}

/// A `<lambda, priority>` queue.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    pub lambda: String,
    pub priority: u8,
}

/// How an execution ended: `success`, `retriable`, `fatal`, `limit`,
/// `trapped`, `host_error`, `killed` or `stopped` (by its watchdog).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub lambda: String,
    pub outcome: &'static str,
}

/// A limit an execution breached: `memory`, `fuel`, `deadline`, `output`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitLabels {
    pub lambda: String,
    pub limit: &'static str,
}

/// An outbound request of a lambda: its destination's host, and `2xx`…
/// `5xx`, `denied` or `failed`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutboundLabels {
    pub lambda: String,
    pub host: String,
    pub outcome: &'static str,
}

/// Why an executor compiled a lambda version itself instead of loading the
/// artifact its Frontend compiled: `no_artifact` (none for this engine's
/// fingerprint: a mixed-version rollout, or a Frontend without the key),
/// `refused` (its seal or its bytes did not check), `no_key` (this
/// executor has no installation key to check seals with), `unavailable`
/// (the Frontend did not answer).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CompileLabels {
    pub lambda: String,
    pub reason: &'static str,
}

/// Every metric Waft records.
pub struct Metrics {
    pub scheduled: Family<LambdaLabels, Counter>,
    pub refused_by_quota: Family<LambdaLabels, Counter>,
    pub enqueued: Family<QueueLabels, Counter>,
    pub started: Family<LambdaLabels, Counter>,
    pub ended: Family<OutcomeLabels, Counter>,
    pub limit_breaches: Family<LimitLabels, Counter>,
    pub heartbeat_failures: Family<LambdaLabels, Counter>,
    pub heartbeat_calls: Counter,
    pub heartbeats: Counter,
    pub self_terminations: Family<LambdaLabels, Counter>,
    pub schedule_to_start: Family<LambdaLabels, Histogram>,
    pub execution_time: Family<LambdaLabels, Histogram>,
    pub queue_depth: Family<QueueLabels, Gauge>,
    pub oldest_ready_age: Family<QueueLabels, Gauge<f64, AtomicU64>>,
    pub outbound_requests: Family<OutboundLabels, Counter>,
    pub outbound_time: Family<LambdaLabels, Histogram>,
    pub local_compiles: Family<CompileLabels, Counter>,
    registry: Registry,
}

/// 1 ms to ~33 s, doubling.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

impl Metrics {
    fn new() -> Self {
        let mut metrics = Self {
            scheduled: Family::default(),
            refused_by_quota: Family::default(),
            enqueued: Family::default(),
            started: Family::default(),
            ended: Family::default(),
            limit_breaches: Family::default(),
            heartbeat_failures: Family::default(),
            heartbeat_calls: Counter::default(),
            heartbeats: Counter::default(),
            self_terminations: Family::default(),
            schedule_to_start: Family::new_with_constructor(latency_histogram),
            execution_time: Family::new_with_constructor(latency_histogram),
            queue_depth: Family::default(),
            oldest_ready_age: Family::default(),
            outbound_requests: Family::default(),
            outbound_time: Family::new_with_constructor(latency_histogram),
            local_compiles: Family::default(),
            registry: Registry::with_prefix("waft"),
        };
        let r = &mut metrics.registry;
        r.register(
            "tasks_scheduled",
            "Tasks stored by the Frontend",
            metrics.scheduled.clone(),
        );
        r.register(
            "tasks_refused_by_quota",
            "Tasks the Frontend refused over their lambda's quota",
            metrics.refused_by_quota.clone(),
        );
        r.register(
            "tasks_enqueued",
            "Tasks the Store Consumer sent to their queue",
            metrics.enqueued.clone(),
        );
        r.register(
            "local_compiles",
            "Lambda versions an executor compiled itself instead of loading their artifact, by reason",
            metrics.local_compiles.clone(),
        );
        r.register(
            "executions_started",
            "Executions an executor started",
            metrics.started.clone(),
        );
        r.register(
            "executions_ended",
            "Executions ended, by outcome",
            metrics.ended.clone(),
        );
        r.register(
            "limit_breaches",
            "Executions stopped by a limit, by limit",
            metrics.limit_breaches.clone(),
        );
        r.register(
            "heartbeat_failures",
            "Heartbeats that failed or went unanswered",
            metrics.heartbeat_failures.clone(),
        );
        r.register(
            "hsc_heartbeat_calls",
            "Heartbeat calls the HSC answered (each carries the beats of many tasks)",
            metrics.heartbeat_calls.clone(),
        );
        r.register(
            "hsc_heartbeats",
            "Task heartbeats the HSC recorded or refused",
            metrics.heartbeats.clone(),
        );
        r.register(
            "self_terminations",
            "Executions their executor stopped (lease lost or heartbeats failed)",
            metrics.self_terminations.clone(),
        );
        r.register(
            "schedule_to_start_seconds",
            "From the time a task was due to its first execution's start",
            metrics.schedule_to_start.clone(),
        );
        r.register(
            "execution_seconds",
            "How long executions ran",
            metrics.execution_time.clone(),
        );
        r.register(
            "queue_depth",
            "Messages waiting in a queue (approximate for SQS)",
            metrics.queue_depth.clone(),
        );
        r.register(
            "oldest_ready_task_age_seconds",
            "Age of the oldest due task that has not started",
            metrics.oldest_ready_age.clone(),
        );
        r.register(
            "outbound_requests",
            "Outbound HTTP requests of lambdas, by destination host and outcome",
            metrics.outbound_requests.clone(),
        );
        r.register(
            "outbound_request_seconds",
            "From an outbound request's start to its response's headers",
            metrics.outbound_time.clone(),
        );
        metrics
    }

    /// Counts one outbound request of `lambda`. A refused request's host
    /// is not a label (`-`): the lambda chose it, and a label per refused
    /// name would let a lambda grow the metrics without bound.
    pub fn outbound_request(
        &self,
        lambda: &str,
        host: &str,
        outcome: &'static str,
        took: Duration,
    ) {
        self.outbound_requests
            .get_or_create(&OutboundLabels {
                lambda: lambda.to_owned(),
                host: if outcome == "denied" { "-" } else { host }.to_owned(),
                outcome,
            })
            .inc();
        if outcome != "denied" {
            self.outbound_time
                .get_or_create(&LambdaLabels {
                    lambda: lambda.to_owned(),
                })
                .observe(took.as_secs_f64());
        }
    }

    /// Counts an execution's end and how long it ran.
    pub fn execution_ended(&self, lambda: &str, outcome: &'static str, ran: Duration) {
        let labels = LambdaLabels {
            lambda: lambda.to_owned(),
        };
        self.execution_time
            .get_or_create(&labels)
            .observe(ran.as_secs_f64());
        self.ended
            .get_or_create(&OutcomeLabels {
                lambda: labels.lambda,
                outcome,
            })
            .inc();
    }
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// This process's metrics.
pub fn metrics() -> &'static Metrics {
    &METRICS
}

/// The labels of `lambda`.
pub fn lambda(lambda: &str) -> LambdaLabels {
    LambdaLabels {
        lambda: lambda.to_owned(),
    }
}

/// Every metric in the Prometheus text format.
pub fn encode() -> String {
    let mut text = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut text, &METRICS.registry);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_metrics_are_encoded_with_their_labels() {
        metrics().scheduled.get_or_create(&lambda("enc-test")).inc();
        metrics().execution_ended("enc-test", "success", Duration::from_millis(3));
        let text = encode();
        assert!(
            text.contains("waft_tasks_scheduled_total{lambda=\"enc-test\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("waft_executions_ended_total{lambda=\"enc-test\",outcome=\"success\"} 1"),
            "{text}"
        );
        assert!(text.contains("waft_execution_seconds_bucket"), "{text}");
    }
}
