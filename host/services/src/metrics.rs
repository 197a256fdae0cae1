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
//! Every label's values are bounded by what operators deploy, never by what
//! a lambda does: an outbound request's host is a label for the first
//! [`MAX_HOSTS_PER_LAMBDA`] hosts of each lambda and [`OTHER_HOSTS`] beyond,
//! so a lambda granted `*.example.com` cannot add a series per name it
//! makes up.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::{LazyLock, Mutex, PoisonError};
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

/// An outbound request of a lambda: its destination's host (`-` when
/// refused, [`OTHER_HOSTS`] past the lambda's first
/// [`MAX_HOSTS_PER_LAMBDA`]), and `2xx`…`5xx`, `denied` or `failed`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutboundLabels {
    pub lambda: String,
    pub host: String,
    pub outcome: &'static str,
}

/// A limit that held a lambda's due tasks back: `quota`,
/// `key_concurrency` or `key_rate`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitedLabels {
    pub lambda: String,
    pub limit: &'static str,
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
    pub limited: Family<LimitedLabels, Counter>,
    pub pruned: Counter,
    pub purged: Counter,
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
    /// The hosts that are labels of their own, per lambda.
    outbound_hosts: Mutex<HashMap<String, HashSet<String>>>,
    registry: Registry,
}

/// Hosts of one lambda that are labels of their own: the first ones its
/// requests reach, for the process's life.
pub const MAX_HOSTS_PER_LAMBDA: usize = 32;

/// The host label of every request past a lambda's first
/// [`MAX_HOSTS_PER_LAMBDA`] hosts (not a host name, so it names none).
pub const OTHER_HOSTS: &str = "(other)";

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
            limited: Family::default(),
            pruned: Counter::default(),
            purged: Counter::default(),
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
            outbound_hosts: Mutex::default(),
            registry: Registry::with_prefix("waft"),
        };
        metrics.register_tasks();
        metrics.register_executions();
        metrics.register_heartbeats();
        metrics.register_waits();
        metrics.register_outbound();
        metrics
    }

    /// Tasks the Frontend stores or refuses, the Store Consumer enqueues, and
    /// the pruner and operators delete.
    fn register_tasks(&mut self) {
        let r = &mut self.registry;
        r.register(
            "tasks_scheduled",
            "Tasks stored by the Frontend",
            self.scheduled.clone(),
        );
        r.register(
            "tasks_refused_by_quota",
            "Tasks the Frontend refused over their lambda's quota",
            self.refused_by_quota.clone(),
        );
        r.register(
            "tasks_enqueued",
            "Tasks the Store Consumer sent to their queue",
            self.enqueued.clone(),
        );
        r.register(
            "tasks_limited",
            "Due tasks the Store Consumer held back by a limit (parked, or waiting for a slot), by limit",
            self.limited.clone(),
        );
        r.register(
            "tasks_pruned",
            "Ended tasks the pruner deleted past their retention",
            self.pruned.clone(),
        );
        r.register(
            "tasks_purged",
            "Dead letters an operator deleted",
            self.purged.clone(),
        );
    }

    /// Executions an executor compiles for, starts and ends.
    fn register_executions(&mut self) {
        let r = &mut self.registry;
        r.register(
            "local_compiles",
            "Lambda versions an executor compiled itself instead of loading their artifact, by reason",
            self.local_compiles.clone(),
        );
        r.register(
            "executions_started",
            "Executions an executor started",
            self.started.clone(),
        );
        r.register(
            "executions_ended",
            "Executions ended, by outcome",
            self.ended.clone(),
        );
        r.register(
            "limit_breaches",
            "Executions stopped by a limit, by limit",
            self.limit_breaches.clone(),
        );
    }

    /// Heartbeats, and the executions they stopped.
    fn register_heartbeats(&mut self) {
        let r = &mut self.registry;
        r.register(
            "heartbeat_failures",
            "Heartbeats that failed or went unanswered",
            self.heartbeat_failures.clone(),
        );
        r.register(
            "hsc_heartbeat_calls",
            "Heartbeat calls the HSC answered (each carries the beats of many tasks)",
            self.heartbeat_calls.clone(),
        );
        r.register(
            "hsc_heartbeats",
            "Task heartbeats the HSC recorded or refused",
            self.heartbeats.clone(),
        );
        r.register(
            "self_terminations",
            "Executions their executor stopped (lease lost or heartbeats failed)",
            self.self_terminations.clone(),
        );
    }

    /// How long tasks wait and run, and what waits in the queues.
    fn register_waits(&mut self) {
        let r = &mut self.registry;
        r.register(
            "schedule_to_start_seconds",
            "From the time a task was due to its first execution's start",
            self.schedule_to_start.clone(),
        );
        r.register(
            "execution_seconds",
            "How long executions ran",
            self.execution_time.clone(),
        );
        r.register(
            "queue_depth",
            "Messages waiting in a queue (approximate for SQS)",
            self.queue_depth.clone(),
        );
        r.register(
            "oldest_ready_task_age_seconds",
            "Age of the oldest due task that has not started",
            self.oldest_ready_age.clone(),
        );
    }

    /// Lambdas' outbound HTTP requests.
    fn register_outbound(&mut self) {
        let r = &mut self.registry;
        r.register(
            "outbound_requests",
            "Outbound HTTP requests of lambdas, by destination host (past a lambda's first hosts, (other)) and outcome",
            self.outbound_requests.clone(),
        );
        r.register(
            "outbound_request_seconds",
            "From an outbound request's start to its response's headers",
            self.outbound_time.clone(),
        );
    }

    /// Counts one outbound request of `lambda`. A refused request's host
    /// is not a label (`-`), and past the lambda's first
    /// [`MAX_HOSTS_PER_LAMBDA`] hosts neither is an answered one's
    /// ([`OTHER_HOSTS`]): the lambda chooses them, and a label per name
    /// would let it grow the metrics without bound.
    pub fn outbound_request(
        &self,
        lambda: &str,
        host: &str,
        outcome: &'static str,
        took: Duration,
    ) {
        let host = if outcome == "denied" {
            "-".to_owned()
        } else {
            self.host_label(lambda, host)
        };
        self.outbound_requests
            .get_or_create(&OutboundLabels {
                lambda: lambda.to_owned(),
                host,
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

    /// `host` when it is one of `lambda`'s labelled hosts or there is room
    /// for it among them; [`OTHER_HOSTS`] otherwise.
    fn host_label(&self, lambda: &str, host: &str) -> String {
        let mut labelled = self
            .outbound_hosts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let hosts = match labelled.get_mut(lambda) {
            Some(hosts) => hosts,
            None => labelled.entry(lambda.to_owned()).or_default(),
        };
        if hosts.contains(host) {
            return host.to_owned();
        }
        if hosts.len() < MAX_HOSTS_PER_LAMBDA {
            hosts.insert(host.to_owned());
            return host.to_owned();
        }
        OTHER_HOSTS.to_owned()
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

    /// A lambda granted `*.example.com` that calls ten thousand names of
    /// its own making adds a bounded number of series, and keeps the hosts
    /// it called first under their names.
    #[test]
    fn hosts_a_lambda_chooses_add_a_bounded_number_of_series() {
        let record = |host: &str| {
            metrics().outbound_request("card-test", host, "2xx", Duration::from_millis(1));
        };
        record("api.example.com");
        for i in 0..10_000 {
            record(&format!("x{i:x}q{}.example.com", i * 7919));
        }
        record("api.example.com");
        let text = encode();
        let series: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("waft_outbound_requests_total{lambda=\"card-test\""))
            .collect();
        assert!(
            series.len() <= MAX_HOSTS_PER_LAMBDA + 1,
            "{} series",
            series.len()
        );
        assert!(
            series.contains(
                &"waft_outbound_requests_total{lambda=\"card-test\",host=\"api.example.com\",outcome=\"2xx\"} 2"
            ),
            "{series:#?}"
        );
        let other = format!(
            "waft_outbound_requests_total{{lambda=\"card-test\",host=\"{OTHER_HOSTS}\",outcome=\"2xx\"}} {}",
            10_001 - MAX_HOSTS_PER_LAMBDA
        );
        assert!(series.contains(&other.as_str()), "{series:#?}");
        // Another lambda's hosts have room of their own.
        metrics().outbound_request("card-test-2", "api.example.com", "2xx", Duration::ZERO);
        assert!(encode().contains(
            "waft_outbound_requests_total{lambda=\"card-test-2\",host=\"api.example.com\",outcome=\"2xx\"} 1"
        ));
    }
}
