//! Lambdas and their configuration.

use std::time::Duration;

use waft_core::ServiceResult;
use waft_core::model::{Backlog, Lambda, QueueFills};
use waft_core::retention::{End, Keep, Retention};
use waft_core::{
    Backoff, ByteSize, Grants, KeyFairness, KeyRate, LambdaConfig, Limits, OnDivergence,
    OutboundLimits,
};

use super::*;
use crate::proto;

/// Every field set, so a reader sees the whole effective config.
pub fn config_to_proto(config: &LambdaConfig) -> proto::LambdaConfig {
    proto::LambdaConfig {
        max_memory_bytes: Some(config.limits.max_memory.bytes()),
        timeout_ms: Some(millis(config.limits.timeout)),
        fuel: Some(config.limits.fuel.unwrap_or(0)),
        max_output_bytes: Some(config.limits.max_output.bytes()),
        max_log_bytes: Some(config.limits.max_log.bytes()),
        max_attempts: Some(config.max_attempts),
        backoff_base_ms: Some(millis(config.backoff.base)),
        backoff_factor: Some(config.backoff.factor),
        backoff_max_ms: Some(millis(config.backoff.max)),
        priorities: Some(u32::from(config.priorities)),
        default_priority: Some(u32::from(config.default_priority)),
        max_payload_bytes: Some(config.max_payload.bytes()),
        concurrency: Some(config.concurrency),
        quota_per_sec: config.quota_per_sec,
        key_concurrency: config.key_concurrency,
        key_rate: config.key_rate.map(|rate| proto::KeyRate {
            count: rate.count,
            period_ms: rate.period_ms(),
        }),
        key_fairness: config
            .key_fairness
            .as_ref()
            .map(|fairness| proto::KeyFairness {
                weights: fairness.weights.clone().into_iter().collect(),
                lookahead: Some(fairness.lookahead),
            }),
        allowed_children: config.allowed_children.clone(),
        allow_outbound: config
            .grants
            .outbound
            .iter()
            .map(|pattern| pattern.as_str().to_owned())
            .collect(),
        outbound_limits: Some(outbound_limits_to_proto(&config.grants.outbound_limits)),
        env: config.grants.env.clone().into_iter().collect(),
        on_divergence: Some(on_divergence_to_proto(config.on_divergence) as i32),
        retention: retention_to_proto(&config.retention),
    }
}

pub fn retention_to_proto(retention: &Retention) -> Vec<proto::Retain> {
    retention
        .iter()
        .map(|(end, keep)| proto::Retain {
            end: end.as_str().to_owned(),
            keep_ms: keep.as_millis(),
        })
        .collect()
}

/// Refuses an unknown end, one named twice, and a retention of 0.
pub fn retention_from_proto(retains: Vec<proto::Retain>) -> ServiceResult<Retention> {
    let mut retention = Retention::default();
    for retain in retains {
        let end = End::parse(&retain.end).ok_or_else(|| {
            invalid(format!(
                "retention: {:?} is not an end; one of success, fatal, dropped, cancelled",
                retain.end
            ))
        })?;
        if retention.get(end).is_some() {
            return Err(invalid(format!("retention: {end} is given twice")));
        }
        if retain.keep_ms == Some(0) {
            return Err(invalid(format!(
                "retention: keep {end} tasks for more than 0 ms"
            )));
        }
        retention.set(end, Keep::from_millis(retain.keep_ms));
    }
    Ok(retention)
}

pub fn on_divergence_to_proto(value: OnDivergence) -> proto::OnDivergence {
    match value {
        OnDivergence::Fail => proto::OnDivergence::Fail,
        OnDivergence::Restart => proto::OnDivergence::Restart,
    }
}

/// Absent or unspecified: the default ([`OnDivergence::Fail`]).
pub fn on_divergence_from_proto(value: Option<i32>) -> ServiceResult<OnDivergence> {
    match value.map(proto::OnDivergence::try_from) {
        None | Some(Ok(proto::OnDivergence::Unspecified)) => Ok(OnDivergence::default()),
        Some(Ok(proto::OnDivergence::Fail)) => Ok(OnDivergence::Fail),
        Some(Ok(proto::OnDivergence::Restart)) => Ok(OnDivergence::Restart),
        Some(Err(_)) => Err(invalid(format!(
            "on_divergence {} is unknown; fail or restart",
            value.unwrap_or_default()
        ))),
    }
}

fn outbound_limits_to_proto(limits: &OutboundLimits) -> proto::OutboundLimits {
    proto::OutboundLimits {
        max_requests: Some(limits.max_requests),
        max_connections: Some(limits.max_connections),
        max_response_bytes: Some(limits.max_response.bytes()),
        connect_timeout_ms: Some(millis(limits.connect_timeout)),
        first_byte_timeout_ms: Some(millis(limits.first_byte_timeout)),
        between_bytes_timeout_ms: Some(millis(limits.between_bytes_timeout)),
    }
}

fn outbound_limits_from_proto(limits: Option<proto::OutboundLimits>) -> OutboundLimits {
    let limits = limits.unwrap_or_default();
    let defaults = OutboundLimits::default();
    let ms = |value: Option<u64>, default| value.map_or(default, Duration::from_millis);
    OutboundLimits {
        max_requests: limits.max_requests.unwrap_or(defaults.max_requests),
        max_connections: limits.max_connections.unwrap_or(defaults.max_connections),
        max_response: limits
            .max_response_bytes
            .map_or(defaults.max_response, ByteSize::b),
        connect_timeout: ms(limits.connect_timeout_ms, defaults.connect_timeout),
        first_byte_timeout: ms(limits.first_byte_timeout_ms, defaults.first_byte_timeout),
        between_bytes_timeout: ms(
            limits.between_bytes_timeout_ms,
            defaults.between_bytes_timeout,
        ),
    }
}

/// Absent fields take their defaults; the result is not yet validated.
pub fn config_from_proto(config: Option<proto::LambdaConfig>) -> ServiceResult<LambdaConfig> {
    let config = config.unwrap_or_default();
    let defaults = LambdaConfig::default();
    let small = |value: Option<u32>, name: &str, default: u8| -> ServiceResult<u8> {
        value.map_or(Ok(default), |v| {
            u8::try_from(v).map_err(|_| invalid(format!("{name} {v} is out of range")))
        })
    };
    Ok(LambdaConfig {
        limits: Limits {
            max_memory: config
                .max_memory_bytes
                .map_or(defaults.limits.max_memory, ByteSize::b),
            timeout: config
                .timeout_ms
                .map_or(defaults.limits.timeout, Duration::from_millis),
            fuel: config.fuel.filter(|fuel| *fuel > 0),
            max_output: config
                .max_output_bytes
                .map_or(defaults.limits.max_output, ByteSize::b),
            max_log: config
                .max_log_bytes
                .map_or(defaults.limits.max_log, ByteSize::b),
        },
        max_attempts: config.max_attempts.unwrap_or(defaults.max_attempts),
        backoff: Backoff {
            base: config
                .backoff_base_ms
                .map_or(defaults.backoff.base, Duration::from_millis),
            factor: config.backoff_factor.unwrap_or(defaults.backoff.factor),
            max: config
                .backoff_max_ms
                .map_or(defaults.backoff.max, Duration::from_millis),
        },
        priorities: small(config.priorities, "priorities", defaults.priorities)?,
        default_priority: small(
            config.default_priority,
            "default_priority",
            defaults.default_priority,
        )?,
        max_payload: config
            .max_payload_bytes
            .map_or(defaults.max_payload, ByteSize::b),
        concurrency: config.concurrency.unwrap_or(defaults.concurrency),
        quota_per_sec: config.quota_per_sec,
        key_concurrency: config.key_concurrency,
        key_rate: config.key_rate.map(|rate| KeyRate {
            count: rate.count,
            period: Duration::from_millis(rate.period_ms),
        }),
        key_fairness: config.key_fairness.map(|fairness| KeyFairness {
            weights: fairness.weights.into_iter().collect(),
            lookahead: fairness
                .lookahead
                .filter(|&lookahead| lookahead != 0)
                .unwrap_or(KeyFairness::DEFAULT_LOOKAHEAD),
        }),
        allowed_children: config.allowed_children,
        grants: Grants {
            outbound: config
                .allow_outbound
                .iter()
                .map(|pattern| {
                    pattern
                        .parse()
                        .map_err(|e: waft_core::GrantError| invalid(e.to_string()))
                })
                .collect::<ServiceResult<_>>()?,
            outbound_limits: outbound_limits_from_proto(config.outbound_limits),
            env: config.env.into_iter().collect(),
        },
        on_divergence: on_divergence_from_proto(config.on_divergence)?,
        retention: retention_from_proto(config.retention)?,
    })
}

pub fn lambda_to_proto(lambda: Lambda) -> proto::Lambda {
    proto::Lambda {
        config: Some(config_to_proto(&lambda.config)),
        name: lambda.name,
        version: lambda.version,
        digest: lambda.digest,
        created_at_ms: lambda.created_at,
    }
}

pub fn lambda_from_proto(lambda: proto::Lambda) -> ServiceResult<Lambda> {
    Ok(Lambda {
        config: config_from_proto(Some(required(lambda.config, "lambda.config")?))?,
        name: lambda.name,
        version: lambda.version,
        digest: lambda.digest,
        created_at: lambda.created_at_ms,
    })
}

/// A queue on the wire.
pub fn queue_ref((lambda, priority): (String, u8)) -> proto::QueueRef {
    proto::QueueRef {
        lambda,
        priority: u32::from(priority),
    }
}

/// A queue off the wire: its priority is one byte.
pub fn queue_of(queue: proto::QueueRef) -> ServiceResult<(String, u8)> {
    Ok((queue.lambda, priority(queue.priority)?))
}

/// The fills a Frontend answers a controller, on the wire.
pub fn queue_fills_to_proto(fills: QueueFills) -> proto::WaitQueueFillResponse {
    proto::WaitQueueFillResponse {
        generation: fills.generation,
        queues: fills.queues.into_iter().map(queue_ref).collect(),
        missed: fills.missed,
    }
}

/// The fills a Frontend answered, off the wire.
pub fn queue_fills(response: proto::WaitQueueFillResponse) -> ServiceResult<QueueFills> {
    Ok(QueueFills {
        generation: response.generation,
        queues: (response.queues.into_iter())
            .map(queue_of)
            .collect::<ServiceResult<_>>()?,
        missed: response.missed,
    })
}

/// A queue's backlog on the wire.
pub fn backlog_to_proto(backlog: Backlog) -> proto::QueueBacklog {
    proto::QueueBacklog {
        queue: Some(queue_ref((backlog.lambda, backlog.priority))),
        oldest_due_ms: backlog.oldest_due,
    }
}

/// A queue's backlog off the wire.
pub fn backlog(backlog: proto::QueueBacklog) -> ServiceResult<Backlog> {
    let (lambda, priority) = queue_of(required(backlog.queue, "queue")?)?;
    Ok(Backlog {
        lambda,
        priority,
        oldest_due: backlog.oldest_due_ms,
    })
}
