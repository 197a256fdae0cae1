//! A lambda's configuration: how its tasks run and how they are retried.

use crate::{Backoff, ByteSize, GrantError, Grants, KeyFairness, KeyRate, Limits, LimitsError};

/// Everything an owner configures about a lambda, per version.
///
/// ```
/// let config = waft_core::LambdaConfig { max_attempts: 3, ..Default::default() };
/// config.validate().unwrap();
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct LambdaConfig {
    /// Resource limits of each execution.
    pub limits: Limits,
    /// Executions a task gets before it becomes a dead letter (default 5).
    pub max_attempts: u32,
    /// Delay between a retriable failure and the next attempt.
    pub backoff: Backoff,
    /// Number of priority levels: tasks take priorities `0..priorities`,
    /// higher runs first (default 3).
    pub priorities: u8,
    /// Priority of tasks scheduled without one (default 0).
    pub default_priority: u8,
    /// Largest payload a task may carry (default 256 KiB).
    pub max_payload: ByteSize,
    /// Tasks of this lambda one executor runs at once (default 64).
    pub concurrency: u32,
    /// Tasks per second the lambda may be scheduled at; unlimited if `None`.
    pub quota_per_sec: Option<f64>,
    /// Tasks of one key that may hold a slot at once, across the whole
    /// installation (enqueued or running); unlimited if `None`. A due task
    /// whose key has none free waits in the store (parked) without
    /// spending an attempt.
    pub key_concurrency: Option<u32>,
    /// Starts of one key's tasks a period, across the whole installation:
    /// a token bucket per key ([`KeyRate`]); unlimited if `None`. A due
    /// task whose key has no token waits in the store for its slot.
    pub key_rate: Option<KeyRate>,
    /// Fairness between keys ([`KeyFairness`]): its ready tasks of
    /// different keys take turns, weighted; first come, first served if
    /// `None`.
    pub key_fairness: Option<KeyFairness>,
    /// The other lambdas whose tasks this lambda's executions may schedule
    /// as children (a lambda may always schedule its own). Empty by
    /// default: a child of any other lambda is refused.
    pub allowed_children: Vec<String>,
    /// What its executions may reach: outbound HTTP, configuration
    /// variables. Nothing by default.
    pub grants: Grants,
    /// What an attempt does when the lambda no longer makes the calls its
    /// task's journal recorded (default: it ends fatal).
    pub on_divergence: OnDivergence,
    /// How long its ended tasks are kept, where it differs from the
    /// installation's (none by default).
    pub retention: crate::retention::Retention,
}

/// What an attempt does when its lambda's calls stop matching its task's
/// journal: the code changed, or it is not deterministic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnDivergence {
    /// The attempt ends fatal, saying where and how the calls differ;
    /// nothing live runs after the mismatch.
    #[default]
    Fail,
    /// The journal is discarded and the task starts afresh in the same
    /// attempt: every call runs live again.
    Restart,
}

impl OnDivergence {
    /// Every value, for help texts and checks.
    pub const ALL: [Self; 2] = [Self::Fail, Self::Restart];

    /// Its name in flags, files and the API: `fail`, `restart`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fail => "fail",
            Self::Restart => "restart",
        }
    }

    /// The value named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|value| value.as_str() == name)
    }
}

impl Default for LambdaConfig {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            max_attempts: 5,
            backoff: Backoff::default(),
            priorities: 3,
            default_priority: 0,
            max_payload: ByteSize::kib(256),
            concurrency: 64,
            quota_per_sec: None,
            key_concurrency: None,
            key_rate: None,
            key_fairness: None,
            allowed_children: Vec::new(),
            grants: Grants::default(),
            on_divergence: OnDivergence::Fail,
            retention: crate::retention::Retention::default(),
        }
    }
}

/// A configuration value out of its bounds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Limits(#[from] LimitsError),
    #[error(transparent)]
    Grant(#[from] GrantError),
    #[error("{field} is {value}: {rule}")]
    Invalid {
        field: &'static str,
        value: String,
        rule: &'static str,
    },
}

impl LambdaConfig {
    /// The largest payload any lambda may accept: what one task carries
    /// through the pipeline ([`crate::limits::MAX_CARRIED`]), so that every
    /// task scheduled can be claimed.
    pub const MAX_PAYLOAD: ByteSize = crate::limits::MAX_CARRIED;
    /// The most priority levels a lambda may have.
    pub const MAX_PRIORITIES: u8 = 16;
    /// The slowest scheduling quota: one task an hour. A slower one would
    /// pace a backlog years ahead.
    pub const MIN_QUOTA_PER_SEC: f64 = 1.0 / 3600.0;
    /// The most lambdas one lambda may be allowed to schedule children of.
    pub const MAX_ALLOWED_CHILDREN: usize = 64;

    /// Whether this lambda's executions, of lambda `parent`, may schedule a
    /// task of `child`.
    ///
    /// ```
    /// let config = waft_core::LambdaConfig {
    ///     allowed_children: vec!["hello".into()],
    ///     ..Default::default()
    /// };
    /// assert!(config.allows_child("chain", "hello"));
    /// assert!(config.allows_child("chain", "chain"));
    /// assert!(!config.allows_child("chain", "billing"));
    /// ```
    pub fn allows_child(&self, parent: &str, child: &str) -> bool {
        parent == child || self.allowed_children.iter().any(|name| name == child)
    }

    /// Checks every field against its bounds.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.limits.validate()?;
        self.grants.validate()?;
        let invalid = |field, value: String, rule| Err(ConfigError::Invalid { field, value, rule });
        if !(1..=1000).contains(&self.max_attempts) {
            return invalid(
                "max_attempts",
                self.max_attempts.to_string(),
                "must be within 1..=1000",
            );
        }
        if !(1..=Self::MAX_PRIORITIES).contains(&self.priorities) {
            return invalid(
                "priorities",
                self.priorities.to_string(),
                "must be within 1..=16",
            );
        }
        if self.default_priority >= self.priorities {
            return invalid(
                "default_priority",
                self.default_priority.to_string(),
                "must be below the number of priority levels",
            );
        }
        if self.max_payload > Self::MAX_PAYLOAD {
            return invalid(
                "max_payload",
                self.max_payload.to_string(),
                "must be at most 15MiB, the most a task carries between Waft's processes",
            );
        }
        if !(1..=100_000).contains(&self.concurrency) {
            return invalid(
                "concurrency",
                self.concurrency.to_string(),
                "must be within 1..=100000",
            );
        }
        if let Some(quota) = self.quota_per_sec
            && !(quota.is_finite() && (Self::MIN_QUOTA_PER_SEC..=1e6).contains(&quota))
        {
            return invalid(
                "quota_per_sec",
                quota.to_string(),
                "must be within 1/3600 (one task an hour) and 1000000",
            );
        }
        if let Some(limit) = self.key_concurrency
            && !(1..=100_000).contains(&limit)
        {
            return invalid(
                "key_concurrency",
                limit.to_string(),
                "must be within 1..=100000",
            );
        }
        if let Some(rate) = self.key_rate
            && let Err(rule) = rate.check()
        {
            return invalid("key_rate", rate.to_string(), rule);
        }
        if let Some(fairness) = &self.key_fairness
            && let Err(rule) = fairness.check()
        {
            return invalid(
                "key_fairness",
                rule,
                "weights name at most 1000 keys, each weighing 1..=100; the lookahead is within 1..=10000",
            );
        }
        if self.allowed_children.len() > Self::MAX_ALLOWED_CHILDREN {
            return invalid(
                "allowed_children",
                format!("{} lambdas", self.allowed_children.len()),
                "must name at most 64 lambdas",
            );
        }
        for name in &self.allowed_children {
            if crate::task::check_lambda_name(name).is_err() {
                return invalid(
                    "allowed_children",
                    format!("{name:?}"),
                    "must name lambdas: 1 to 63 characters from a-z, 0-9, '-', '_' and '.'",
                );
            }
        }
        let backoff = &self.backoff;
        if backoff.base.is_zero()
            || backoff.max < backoff.base
            || backoff.max > crate::MAX_RETRY_DELAY
            || !(1.0..=10.0).contains(&backoff.factor)
        {
            return invalid(
                "backoff",
                format!("{backoff:?}"),
                "needs base > 0, base <= max <= 7 days and a factor within 1..=10",
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_enforced() {
        LambdaConfig::default().validate().unwrap();
        let base = LambdaConfig::default();
        for (config, field) in [
            (
                LambdaConfig {
                    max_attempts: 0,
                    ..base.clone()
                },
                "max_attempts",
            ),
            (
                LambdaConfig {
                    priorities: 0,
                    ..base.clone()
                },
                "priorities",
            ),
            (
                LambdaConfig {
                    default_priority: 3,
                    ..base.clone()
                },
                "default_priority",
            ),
            (
                LambdaConfig {
                    max_payload: ByteSize::gib(1),
                    ..base.clone()
                },
                "max_payload",
            ),
            (
                LambdaConfig {
                    concurrency: 0,
                    ..base.clone()
                },
                "concurrency",
            ),
            (
                LambdaConfig {
                    quota_per_sec: Some(f64::NAN),
                    ..base.clone()
                },
                "quota_per_sec",
            ),
            (
                LambdaConfig {
                    key_rate: Some(KeyRate {
                        count: 0,
                        period: std::time::Duration::from_secs(60),
                    }),
                    ..base.clone()
                },
                "key_rate",
            ),
            (
                LambdaConfig {
                    quota_per_sec: Some(1e-9),
                    ..base.clone()
                },
                "quota_per_sec",
            ),
            (
                LambdaConfig {
                    allowed_children: vec!["Billing Run".into()],
                    ..base.clone()
                },
                "allowed_children",
            ),
            (
                LambdaConfig {
                    allowed_children: (0..65).map(|i| format!("l{i}")).collect(),
                    ..base.clone()
                },
                "allowed_children",
            ),
            (
                LambdaConfig {
                    backoff: crate::Backoff {
                        max: std::time::Duration::MAX,
                        ..base.backoff
                    },
                    ..base.clone()
                },
                "backoff",
            ),
        ] {
            let error = config.validate().unwrap_err().to_string();
            assert!(error.starts_with(field), "{error}");
        }
    }

    #[test]
    fn the_largest_payload_is_what_a_task_carries_and_the_refusal_says_so() {
        let at_most = LambdaConfig {
            max_payload: LambdaConfig::MAX_PAYLOAD,
            ..LambdaConfig::default()
        };
        at_most.validate().unwrap();
        let over = LambdaConfig {
            max_payload: ByteSize::b(LambdaConfig::MAX_PAYLOAD.bytes() + 1),
            ..at_most
        };
        let error = over.validate().unwrap_err().to_string();
        let limit = format!("at most {}", LambdaConfig::MAX_PAYLOAD);
        assert!(error.contains(&limit), "{error}");
    }
}
