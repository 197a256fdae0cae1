//! Loading lambda versions: from the artifact the Frontend compiled at
//! deploy when its seal verifies, compiled here otherwise; ahead of their
//! first task when a refresh finds a new version.
//!
//! Loading from the artifact takes milliseconds where compiling a Python
//! or JavaScript lambda takes seconds; a version compiled here is counted
//! in `waft_local_compiles_total` with why, so an operator sees a
//! mixed-version rollout or a missing key.

use std::sync::Arc;

use waft_runtime::{Digest, PreparedLambda, Sandbox};
use waft_store::Lambda;

use super::{Executor, Loaded};
use crate::metrics;

impl Executor {
    /// Loads, beside the run loop, the versions that a refresh found new
    /// since the one before (a deploy or a rollback): the first task of a
    /// new version finds it loaded.
    pub(super) fn preload_new(self: &Arc<Self>, before: &[Lambda], now: &[Lambda]) {
        for lambda in now {
            let served =
                self.config.lambdas.is_empty() || self.config.lambdas.contains(&lambda.name);
            let known = before
                .iter()
                .any(|old| old.name == lambda.name && old.version == lambda.version);
            if !served || known || self.versions.contains(&lambda.name, lambda.version) {
                continue;
            }
            let this = self.clone();
            let (name, version) = (lambda.name.clone(), lambda.version);
            tokio::spawn(async move {
                if let Err(error) = this.load(&name, version).await {
                    tracing::warn!(lambda = name, version, %error, "cannot load a new version ahead of its tasks");
                }
            });
        }
    }

    /// A lambda version, loaded on first use (or ahead of it, after a
    /// deploy) and kept while it is among the most recently used.
    pub(super) async fn load(&self, name: &str, version: u32) -> Result<Arc<Loaded>, String> {
        let cell = self.versions.cell(name, version);
        cell.get_or_try_init(|| async {
            let lambda = self
                .frontend
                .lambda_get(name, Some(version))
                .await
                .map_err(|e| format!("cannot load lambda {name} version {version}: {e}"))?;
            let started = std::time::Instant::now();
            let (prepared, how) = self.prepare(&lambda).await?;
            tracing::info!(lambda = name, version, how, elapsed = ?started.elapsed(), "lambda version loaded");
            Ok(Arc::new(Loaded {
                prepared,
                sandbox: Sandbox {
                    limits: lambda.config.limits,
                    grants: Arc::new(lambda.config.grants),
                    secrets: Arc::default(),
                    on_divergence: lambda.config.on_divergence,
                    suspend_after: Some(self.config.suspend_after)
                        .filter(|after| !after.is_zero()),
                    // A task's attempt goes on live where its journal ends.
                    replay_only: false,
                },
            }))
        })
        .await
        .cloned()
    }

    /// A version's code ready to run, and how it was had: the artifact its
    /// Frontend compiled, or, when that cannot be had or trusted, the
    /// component compiled here (counted, with why).
    async fn prepare(&self, lambda: &Lambda) -> Result<(PreparedLambda, &'static str), String> {
        let (name, version) = (&lambda.name, lambda.version);
        let reason = match self.load_artifact(lambda).await {
            Ok(prepared) => return Ok((prepared, "artifact")),
            Err(reason) => reason,
        };
        metrics::metrics()
            .local_compiles
            .get_or_create(&metrics::CompileLabels {
                lambda: name.clone(),
                reason,
            })
            .inc();
        let component = self
            .frontend
            .component_get(&lambda.digest)
            .await
            .map_err(|e| format!("cannot load lambda {name} version {version}: {e}"))?;
        // Checked under the lambda's own limits, as its Frontend did.
        let prepared = self
            .runtime
            .prepare_with_limits(&component, &lambda.config.limits)
            .await
            .map_err(|e| format!("cannot prepare lambda {name} version {version}: {e}"))?;
        Ok((prepared, "compiled"))
    }

    /// The version from its sealed artifact; why not, as the metric's
    /// reason, when there is none for this engine or it cannot be trusted.
    async fn load_artifact(&self, lambda: &Lambda) -> Result<PreparedLambda, &'static str> {
        let (name, version) = (&lambda.name, lambda.version);
        let key = self.artifact_key.as_ref().ok_or("no_key")?;
        let fetched = self
            .frontend
            .artifact_get(&lambda.digest, self.runtime.fingerprint())
            .await;
        let artifact = match fetched {
            Ok(Some(artifact)) => artifact,
            Ok(None) => return Err("no_artifact"),
            Err(error) => {
                tracing::warn!(lambda = name, version, %error, "cannot fetch the compiled artifact; compiling the component instead");
                return Err("unavailable");
            }
        };
        let digest: Digest = lambda.digest.parse().map_err(|error: String| {
            tracing::warn!(lambda = name, version, %error, "compiling the component instead");
            "refused"
        })?;
        self.runtime
            .prepare_sealed_with_limits(digest, artifact, key.artifact_key(), &lambda.config.limits)
            .await
            .map_err(|error| {
                tracing::warn!(lambda = name, version, %error, "compiling the component instead");
                "refused"
            })
    }
}
