//! Scheduling quotas at the Frontend: a lambda with `quota_per_sec` accepts
//! that many new tasks a second, with a burst of one second's worth, and
//! refuses the rest with `RESOURCE_EXHAUSTED` before anything is stored.
//!
//! One token bucket per lambda, kept in this Frontend's memory: with several
//! Frontends each admits the quota, so a lambda's total is the quota times
//! the number of Frontends. The Store Consumer's pacing (in the store,
//! shared by every consumer) is what holds the execution rate to the quota
//! whatever was admitted. The lambda's quota is read from the store at most
//! once a second, so a redeploy that changes it applies within a second.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use waft_store::{Millis, TaskStore};

use crate::{Clock, ServiceError, ServiceResult, lock};

/// How long a lambda's quota is trusted before it is read again.
const QUOTA_TTL: Millis = 1000;

/// The Frontend's token buckets.
pub(crate) struct Quotas {
    store: Arc<dyn TaskStore>,
    clock: Arc<dyn Clock>,
    buckets: Mutex<HashMap<String, Bucket>>,
}

#[derive(Debug, Clone)]
struct Bucket {
    /// Tasks a second; `None` for a lambda without a quota.
    quota: Option<f64>,
    read_at: Millis,
    tokens: f64,
    refilled_at: Millis,
}

impl Bucket {
    /// One second's worth, and at least one task.
    fn capacity(quota: f64) -> f64 {
        quota.max(1.0)
    }

    fn refill(&mut self, now: Millis) {
        if let Some(quota) = self.quota {
            let elapsed = (now - self.refilled_at).max(0) as f64 / 1000.0;
            self.tokens = (self.tokens + elapsed * quota).min(Self::capacity(quota));
        }
        self.refilled_at = now;
    }
}

/// Tasks admitted by [`Quotas::admit`], to give back if the insert fails.
#[must_use]
pub(crate) struct Admitted(BTreeMap<String, u32>);

impl Quotas {
    pub(crate) fn new(store: Arc<dyn TaskStore>, clock: Arc<dyn Clock>) -> Self {
        Self {
            store,
            clock,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes `count` tokens of each lambda, all or none. Unknown lambdas
    /// pass: the store refuses them with a better message.
    pub(crate) async fn admit(&self, wanted: BTreeMap<String, u32>) -> ServiceResult<Admitted> {
        let now = self.clock.now();
        let stale: Vec<String> = {
            let buckets = lock(&self.buckets);
            wanted
                .keys()
                .filter(|name| {
                    buckets
                        .get(*name)
                        .is_none_or(|b| now - b.read_at >= QUOTA_TTL)
                })
                .cloned()
                .collect()
        };
        let mut fresh = Vec::with_capacity(stale.len());
        for name in stale {
            // No bucket for a name that is no lambda: the store refuses its
            // tasks, and a caller making up names must not grow this map.
            if let Some(lambda) = self.store.lambda_get(&name).await? {
                fresh.push((name, lambda.config.quota_per_sec));
            }
        }
        let mut buckets = lock(&self.buckets);
        for (name, quota) in fresh {
            let bucket = buckets.entry(name).or_insert(Bucket {
                quota,
                read_at: now,
                tokens: quota.map_or(0.0, Bucket::capacity),
                refilled_at: now,
            });
            bucket.refill(now);
            bucket.quota = quota;
            bucket.read_at = now;
            if let Some(quota) = quota {
                bucket.tokens = bucket.tokens.min(Bucket::capacity(quota));
            }
        }
        for (name, &count) in &wanted {
            let Some(bucket) = buckets.get_mut(name) else {
                continue;
            };
            bucket.refill(now);
            let Some(quota) = bucket.quota else {
                continue;
            };
            let refused = || {
                crate::metrics::metrics()
                    .refused_by_quota
                    .get_or_create(&crate::metrics::lambda(name))
                    .inc_by(u64::from(count));
            };
            let count = f64::from(count);
            if count > Bucket::capacity(quota) {
                refused();
                return Err(ServiceError::ResourceExhausted(format!(
                    "{count} tasks of lambda {name:?} in one request exceed its quota of {quota} \
                     tasks/s; send at most {} at a time",
                    Bucket::capacity(quota).floor()
                )));
            }
            if bucket.tokens < count {
                refused();
                let wait_ms = ((count - bucket.tokens) / quota * 1000.0).ceil();
                return Err(ServiceError::ResourceExhausted(format!(
                    "lambda {name:?} is over its scheduling quota of {quota} tasks/s; \
                     retry in {wait_ms} ms"
                )));
            }
        }
        for (name, &count) in &wanted {
            if let Some(bucket) = buckets.get_mut(name)
                && bucket.quota.is_some()
            {
                bucket.tokens -= f64::from(count);
            }
        }
        Ok(Admitted(wanted))
    }

    /// Gives back the tokens of tasks that were not stored.
    pub(crate) fn refund(&self, admitted: Admitted) {
        let mut buckets = lock(&self.buckets);
        for (name, count) in admitted.0 {
            if let Some(bucket) = buckets.get_mut(&name)
                && let Some(quota) = bucket.quota
            {
                bucket.tokens = (bucket.tokens + f64::from(count)).min(Bucket::capacity(quota));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicI64, Ordering};

    use waft_core::LambdaConfig;
    use waft_store::{LambdaDeploy, SqliteStore};

    use super::*;

    struct Manual(AtomicI64);
    impl Clock for Manual {
        fn now(&self) -> Millis {
            self.0.load(Ordering::SeqCst)
        }
    }

    async fn quotas(quota: Option<f64>) -> (Quotas, Arc<Manual>, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SqliteStore::open(&dir.path().join("q.db")).await.unwrap());
        for (name, quota) in [("limited", quota), ("free", None)] {
            store
                .lambda_deploy(LambdaDeploy {
                    name: name.into(),
                    digest: "d".into(),
                    component: vec![1],
                    artifact: None,
                    config: LambdaConfig {
                        quota_per_sec: quota,
                        ..LambdaConfig::default()
                    },
                    now: 0,
                })
                .await
                .unwrap();
        }
        let clock = Arc::new(Manual(AtomicI64::new(1_000_000)));
        (Quotas::new(store, clock.clone()), clock, dir)
    }

    fn want(pairs: &[(&str, u32)]) -> BTreeMap<String, u32> {
        pairs.iter().map(|(n, c)| ((*n).to_owned(), *c)).collect()
    }

    #[tokio::test]
    async fn a_burst_of_one_second_then_the_rate() {
        let (quotas, clock, _dir) = quotas(Some(10.0)).await;
        let _ = quotas.admit(want(&[("limited", 10)])).await.unwrap();
        let error = quotas.admit(want(&[("limited", 1)])).await.err().unwrap();
        assert!(
            matches!(&error, ServiceError::ResourceExhausted(m) if m.contains("retry in 100 ms")),
            "{error:?}"
        );
        clock.0.fetch_add(500, Ordering::SeqCst);
        let _ = quotas.admit(want(&[("limited", 5)])).await.unwrap();
        assert!(quotas.admit(want(&[("limited", 1)])).await.is_err());
    }

    #[tokio::test]
    async fn names_that_are_no_lambda_leave_no_bucket() {
        let (quotas, _clock, _dir) = quotas(Some(5.0)).await;
        for i in 0..200 {
            let _ = quotas.admit(want(&[(&format!("nobody-{i}"), 1)])).await;
        }
        assert!(lock(&quotas.buckets).is_empty());
        let _ = quotas.admit(want(&[("limited", 1)])).await.unwrap();
        assert_eq!(lock(&quotas.buckets).len(), 1);
    }

    #[tokio::test]
    async fn all_or_nothing_and_lambdas_without_a_quota_pass() {
        let (quotas, _clock, _dir) = quotas(Some(10.0)).await;
        let _ = quotas.admit(want(&[("free", 100_000)])).await.unwrap();
        assert!(
            quotas
                .admit(want(&[("free", 1), ("limited", 11)]))
                .await
                .is_err()
        );
        // Nothing was taken by the refused request.
        let admitted = quotas.admit(want(&[("limited", 10)])).await.unwrap();
        quotas.refund(admitted);
        let _ = quotas.admit(want(&[("limited", 10)])).await.unwrap();
        let _ = quotas.admit(want(&[("nope", 3)])).await.unwrap();
    }
}
