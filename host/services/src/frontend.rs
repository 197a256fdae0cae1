//! The Frontend: where clients schedule tasks and owners deploy lambdas.
//!
//! It validates everything before the store sees it and stores each request
//! in one transaction, so bad input is refused whole. A deploy compiles and
//! trial-instantiates the component first: a `.wasm` that is not a Waft
//! lambda is refused at deploy, not discovered at its first task. When a
//! request stores a task due now, the Frontend signals the Store Consumer
//! so the task does not wait for the next poll tick. Lambdas with a
//! scheduling quota are held to it here ([`crate::quota`]).
//!
//! A deploy compiles the component once, here, and stores the compiled
//! artifact beside it, sealed under the installation's key, so executors
//! load it in milliseconds instead of compiling it each
//! (`waft_runtime::ArtifactKey` says why it is sealed). Every deploy and
//! rollback moves the lambdas' generation, which executors and controllers
//! follow ([`FrontendApi::lambda_changed`]): they learn of a new version at
//! once, not at their next refresh.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use waft_core::cron::DEFAULT_TIMEZONE;
use waft_core::limits::check_payload;
use waft_core::{CronSchedule, LambdaConfig};
use waft_runtime::{Digest, Runtime};
use waft_store::{
    Artifact, Attempt, Cron, DeadRedrive, DeadSelector, Gate, GateSet, GateState, GcReport, Lambda,
    LambdaDeploy, LambdaGc, LambdaRollback, Millis, NewTask, Overview, SealedSecrets, SecretInfo,
    SecretSet, StatusCount, Task, TaskCount, TaskInsertMany, TaskInserted, TaskList, TaskStore,
    Token, TokenCreate, TokenRole,
};

use crate::quota::Quotas;
use crate::secrets::SecretKey;
use crate::{Clock, CronRequest, FrontendApi, RunAt, ServiceError, ServiceResult, TaskRequest};
use crate::{auth, metrics};

/// Tasks one request may schedule: one request is one transaction.
pub const MAX_TASKS_PER_REQUEST: usize = 10_000;
/// The largest component a lambda may deploy.
pub const MAX_COMPONENT_BYTES: usize = 64 << 20;
/// Versions of a lambda kept after a deploy or rollback, by default.
pub const KEEP_VERSIONS: u32 = 10;

/// Tells the Store Consumer when stored tasks come due, and other
/// processes' Frontends when the lambdas change.
#[async_trait]
pub trait DueSignal: Send + Sync {
    /// Tasks were stored that come due at `at` (Unix milliseconds; now or
    /// earlier for immediate ones): the consumer takes a turn then rather
    /// than at its next poll. Best effort: a lost signal only delays tasks
    /// until the next poll.
    async fn due(&self, at: Millis);
    /// A lambda was deployed or rolled back. Frontends of other processes
    /// that hear it call [`Frontend::note_lambdas_changed`], so executors
    /// and controllers following any Frontend learn of it at once. Nothing
    /// by default: in one process there is no other Frontend.
    async fn lambdas_changed(&self) {}
}

#[async_trait]
impl DueSignal for crate::Wake {
    async fn due(&self, at: Millis) {
        self.wake_at(at);
    }
}

/// The Frontend role.
pub struct Frontend {
    store: Arc<dyn TaskStore>,
    clock: Arc<dyn Clock>,
    /// Checks components at deploy.
    runtime: Arc<Runtime>,
    due: Arc<dyn DueSignal>,
    quotas: Quotas,
    keep_versions: u32,
    /// Seals secrets and artifacts; none: secrets cannot be set, and
    /// executors compile what is deployed themselves.
    secrets: Option<Arc<SecretKey>>,
    /// The lambdas' generation: changes at every deploy and rollback
    /// ([`FrontendApi::lambda_changed`]).
    generation: watch::Sender<u64>,
}

/// The longest [`FrontendApi::lambda_changed`] waits.
pub const MAX_CHANGE_WAIT: Duration = Duration::from_secs(30);

impl Frontend {
    /// A Frontend storing into `store`, checking components with `runtime`
    /// and signalling due tasks through `due`.
    pub fn new(
        store: Arc<dyn TaskStore>,
        clock: Arc<dyn Clock>,
        runtime: Arc<Runtime>,
        due: Arc<dyn DueSignal>,
    ) -> Self {
        Self {
            quotas: Quotas::new(store.clone(), clock.clone()),
            store,
            clock,
            runtime,
            due,
            keep_versions: KEEP_VERSIONS,
            secrets: None,
            generation: watch::Sender::new(first_generation()),
        }
    }

    /// The lambdas changed, here or in another process: wakes every
    /// [`FrontendApi::lambda_changed`] waiting.
    pub fn note_lambdas_changed(&self) {
        self.generation
            .send_modify(|generation| *generation = generation.wrapping_add(1));
    }

    /// After this Frontend changed the lambdas.
    async fn lambdas_changed(&self) {
        self.note_lambdas_changed();
        self.due.lambdas_changed().await;
    }

    /// Seals the secrets `waft secret set` sends with `key`.
    pub fn secrets(mut self, key: Arc<SecretKey>) -> Self {
        self.secrets = Some(key);
        self
    }

    /// Keeps this many versions of each lambda (at least 1, the current);
    /// older ones and the components nothing uses any more are deleted
    /// after each deploy and rollback, except versions pinned by tasks that
    /// may still run.
    pub fn keep_versions(mut self, keep: u32) -> Self {
        self.keep_versions = keep.max(1);
        self
    }

    /// Collects the lambda's old versions; a failure only delays it to the
    /// next deploy.
    async fn collect_versions(&self, lambda: &str) {
        let gc = LambdaGc {
            lambda: lambda.to_owned(),
            keep: self.keep_versions,
        };
        match self.store.lambda_gc(gc).await {
            Ok(report) if report != GcReport::default() => tracing::info!(
                lambda,
                versions = report.versions,
                components = report.components,
                "old versions collected"
            ),
            Ok(_) => {}
            Err(error) => tracing::warn!(lambda, %error, "cannot collect old versions"),
        }
    }
}

#[async_trait]
impl FrontendApi for Frontend {
    async fn task_schedule_many(
        &self,
        tasks: Vec<TaskRequest>,
    ) -> ServiceResult<Vec<TaskInserted>> {
        if tasks.is_empty() {
            return Err(ServiceError::InvalidArgument("no tasks to schedule".into()));
        }
        if tasks.len() > MAX_TASKS_PER_REQUEST {
            return Err(ServiceError::ResourceExhausted(format!(
                "{} tasks in one request; send at most {MAX_TASKS_PER_REQUEST}",
                tasks.len()
            )));
        }
        let now = self.clock.now();
        // The earliest of the tasks' due times, for the consumer.
        let mut earliest: Option<Millis> = None;
        let tasks = tasks
            .into_iter()
            .map(|task| {
                check_payload(&task.lambda, task.payload.len())
                    .map_err(ServiceError::ResourceExhausted)?;
                let run_at = match task.run_at {
                    RunAt::Now => None,
                    RunAt::At(at) => Some(at),
                    RunAt::After(delay) => {
                        let delay = i64::try_from(delay.as_millis()).map_err(|_| {
                            ServiceError::InvalidArgument(format!("delay {delay:?} is too long"))
                        })?;
                        Some(now.saturating_add(delay))
                    }
                };
                let due = run_at.map_or(now, |at| at.max(now));
                earliest = Some(earliest.map_or(due, |e| e.min(due)));
                Ok(NewTask {
                    lambda: task.lambda,
                    collection: task.collection,
                    priority: task.priority,
                    payload: task.payload,
                    run_at,
                    idempotency_key: task.idempotency_key,
                    parent_id: task.parent_id,
                    version: task.version,
                    parent_lease: task.parent_lease,
                    continuation: task.then,
                })
            })
            .collect::<ServiceResult<Vec<_>>>()?;
        // A continuation's task is created later, by the store, when this
        // one succeeds: it is counted against its own lambda's quota now.
        let mut wanted = BTreeMap::new();
        for task in &tasks {
            *wanted.entry(task.lambda.clone()).or_insert(0) += 1;
            if let Some(then) = &task.continuation {
                *wanted.entry(then.lambda.clone()).or_insert(0) += 1;
            }
        }
        let lambdas: Vec<String> = tasks.iter().map(|task| task.lambda.clone()).collect();
        let admitted = self.quotas.admit(wanted).await?;
        let inserted = match self
            .store
            .task_insert_many(TaskInsertMany { tasks, now })
            .await
        {
            Ok(inserted) => inserted,
            Err(error) => {
                self.quotas.refund(admitted);
                return Err(error.into());
            }
        };
        // Counted per lambda, not per task: each count takes the metric
        // family's lock.
        let mut created: BTreeMap<&str, u64> = BTreeMap::new();
        for (lambda, task) in lambdas.iter().zip(&inserted) {
            if task.created {
                *created.entry(lambda).or_default() += 1;
            }
        }
        let scheduled = &metrics::metrics().scheduled;
        for (lambda, count) in created {
            scheduled
                .get_or_create(&metrics::lambda(lambda))
                .inc_by(count);
        }
        if let Some(at) = earliest {
            self.due.due(at).await;
        }
        Ok(inserted)
    }

    async fn task_get(&self, id: &str) -> ServiceResult<Task> {
        self.store
            .task_get(id)
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("no task {id}")))
    }

    async fn task_list(&self, filter: TaskList) -> ServiceResult<Vec<Task>> {
        Ok(self.store.task_list(filter).await?)
    }

    async fn task_count(&self, filter: TaskCount) -> ServiceResult<Vec<StatusCount>> {
        Ok(self.store.task_count(filter).await?)
    }

    async fn lambda_stats(&self, window: Duration) -> ServiceResult<Overview> {
        let now = self.clock.now();
        let window = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
        let lambdas = self
            .store
            .lambda_stats(now, now.saturating_sub(window))
            .await?;
        Ok(Overview { now, lambdas })
    }

    async fn task_cancel(&self, id: &str) -> ServiceResult<Task> {
        Ok(self.store.task_cancel(id, self.clock.now()).await?)
    }

    async fn task_attempts(&self, id: &str) -> ServiceResult<Vec<Attempt>> {
        let attempts = self.store.attempt_list(id).await?;
        if attempts.is_empty() && self.store.task_get(id).await?.is_none() {
            return Err(ServiceError::NotFound(format!("no task {id}")));
        }
        Ok(attempts)
    }

    async fn lambda_deploy(
        &self,
        name: &str,
        component: Vec<u8>,
        config: LambdaConfig,
    ) -> ServiceResult<Lambda> {
        waft_core::task::check_lambda_name(name)
            .map_err(|error| ServiceError::InvalidArgument(error.to_string()))?;
        config
            .validate()
            .map_err(|error| ServiceError::InvalidArgument(format!("invalid config: {error}")))?;
        if component.len() > MAX_COMPONENT_BYTES {
            return Err(ServiceError::ResourceExhausted(format!(
                "the component is {} bytes; the limit is {MAX_COMPONENT_BYTES}",
                component.len()
            )));
        }
        // Instantiated once under the lambda's own limits, as a run would be.
        let prepared = self
            .runtime
            .prepare_with_limits(&component, &config.limits)
            .await
            .map_err(|error| {
                ServiceError::InvalidArgument(format!("cannot deploy {name:?}: {error}"))
            })?;
        prepared.check_grants(&config.grants).map_err(|error| {
            ServiceError::InvalidArgument(format!("cannot deploy {name:?}: {error}"))
        })?;
        // Compiled once, here: executors load this instead of compiling.
        let artifact = self.secrets.as_ref().and_then(|key| {
            prepared
                .seal(key.artifact_key())
                .inspect_err(|error| {
                    tracing::warn!(lambda = name, %error, "cannot keep the compiled component; executors will compile it");
                })
                .ok()
        });
        drop(prepared);
        let lambda = self
            .store
            .lambda_deploy(LambdaDeploy {
                name: name.to_owned(),
                digest: Digest::of(&component).to_string(),
                component,
                artifact,
                config,
                now: self.clock.now(),
            })
            .await?;
        tracing::info!(lambda = name, version = lambda.version, digest = %lambda.digest, "deployed");
        self.lambdas_changed().await;
        self.collect_versions(name).await;
        Ok(lambda)
    }

    async fn lambda_rollback(&self, name: &str, to: Option<u32>) -> ServiceResult<Lambda> {
        let lambda = self
            .store
            .lambda_rollback(LambdaRollback {
                name: name.to_owned(),
                to,
                now: self.clock.now(),
            })
            .await?;
        tracing::info!(lambda = name, version = lambda.version, digest = %lambda.digest, "rolled back");
        self.lambdas_changed().await;
        self.collect_versions(name).await;
        Ok(lambda)
    }

    async fn lambda_versions(&self, name: &str) -> ServiceResult<Vec<Lambda>> {
        Ok(self.store.lambda_versions(name).await?)
    }

    async fn lambda_get(&self, name: &str, version: Option<u32>) -> ServiceResult<Lambda> {
        let found = match version {
            None => self.store.lambda_get(name).await?,
            Some(version) => self.store.lambda_get_version(name, version).await?,
        };
        found.ok_or_else(|| {
            ServiceError::NotFound(match version {
                None => format!("unknown lambda {name:?}"),
                Some(version) => format!("lambda {name:?} has no version {version}"),
            })
        })
    }

    async fn lambda_list(&self) -> ServiceResult<Vec<Lambda>> {
        Ok(self.store.lambda_list().await?)
    }

    async fn gate_set(
        &self,
        lambda: &str,
        collection: Option<&str>,
        state: GateState,
    ) -> ServiceResult<u64> {
        let released = self
            .store
            .gate_set(GateSet {
                lambda: lambda.to_owned(),
                collection: collection.map(str::to_owned),
                state,
                now: self.clock.now(),
            })
            .await?;
        if released > 0 {
            self.due.due(self.clock.now()).await;
        }
        tracing::info!(
            lambda,
            ?collection,
            state = state.as_str(),
            released,
            "gate set"
        );
        Ok(released)
    }

    async fn gate_list(&self) -> ServiceResult<Vec<Gate>> {
        Ok(self.store.gate_list().await?)
    }

    async fn dead_redrive(
        &self,
        selector: DeadSelector,
        version: Option<u32>,
    ) -> ServiceResult<u64> {
        if matches!(&selector, DeadSelector::Ids(ids) if ids.is_empty()) {
            return Err(ServiceError::InvalidArgument(
                "name the dead tasks to redrive, or a lambda".into(),
            ));
        }
        let redriven = self
            .store
            .dead_redrive(DeadRedrive {
                selector,
                version,
                now: self.clock.now(),
            })
            .await?;
        if redriven > 0 {
            self.due.due(self.clock.now()).await;
        }
        Ok(redriven)
    }

    async fn token_create(
        &self,
        name: &str,
        role: TokenRole,
        lambdas: Vec<String>,
    ) -> ServiceResult<(Token, String)> {
        if name.is_empty() || name.len() > 200 {
            return Err(ServiceError::InvalidArgument(
                "a token's name is 1 to 200 bytes".into(),
            ));
        }
        if role == TokenRole::Admin && !lambdas.is_empty() {
            return Err(ServiceError::InvalidArgument(
                "an admin token has every lambda; name lambdas only for owner or scheduler tokens"
                    .into(),
            ));
        }
        let secret = auth::new_secret();
        let token = Token {
            id: waft_store::new_id(),
            name: name.to_owned(),
            role,
            lambdas,
            created_at: self.clock.now(),
            revoked_at: None,
        };
        self.store
            .token_create(TokenCreate {
                token: token.clone(),
                hash: auth::hash_secret(&secret),
            })
            .await?;
        tracing::info!(token = %token.id, name, role = role.as_str(), "token created");
        Ok((token, secret))
    }

    async fn token_list(&self) -> ServiceResult<Vec<Token>> {
        Ok(self.store.token_list().await?)
    }

    async fn token_revoke(&self, id: &str) -> ServiceResult<()> {
        if !self.store.token_revoke(id, self.clock.now()).await? {
            return Err(ServiceError::NotFound(format!("no token {id}")));
        }
        tracing::info!(token = id, "token revoked");
        Ok(())
    }

    async fn secret_set(&self, lambda: &str, name: &str, value: &str) -> ServiceResult<()> {
        let key = self.secrets.as_ref().ok_or_else(|| {
            ServiceError::FailedPrecondition(
                "this Frontend has no secrets key: set secrets.key_file \
                 (waft dev makes one in its data directory)"
                    .into(),
            )
        })?;
        waft_core::grants::check_key(name)
            .map_err(|e| ServiceError::InvalidArgument(e.to_string()))?;
        if value.len() > waft_core::Grants::MAX_VALUE {
            return Err(ServiceError::InvalidArgument(format!(
                "secret {name} is {} bytes; at most {} are allowed",
                value.len(),
                waft_core::Grants::MAX_VALUE
            )));
        }
        self.store
            .secret_set(SecretSet {
                lambda: lambda.to_owned(),
                name: name.to_owned(),
                sealed: key.seal(lambda, name, value),
                now: self.clock.now(),
            })
            .await?;
        tracing::info!(lambda, secret = name, "secret set");
        Ok(())
    }

    async fn secret_list(&self, lambda: &str) -> ServiceResult<Vec<SecretInfo>> {
        Ok(self.store.secret_list(lambda).await?)
    }

    async fn secret_remove(&self, lambda: &str, name: &str) -> ServiceResult<()> {
        if !self.store.secret_remove(lambda, name).await? {
            return Err(ServiceError::NotFound(format!(
                "lambda {lambda:?} has no secret {name:?}"
            )));
        }
        tracing::info!(lambda, secret = name, "secret removed");
        Ok(())
    }

    async fn secret_sealed(&self, lambda: &str) -> ServiceResult<SealedSecrets> {
        Ok(self.store.secret_sealed(lambda).await?)
    }

    async fn cron_create(&self, request: CronRequest) -> ServiceResult<Cron> {
        check_payload(&request.lambda, request.payload.len())
            .map_err(ServiceError::ResourceExhausted)?;
        let timezone = request
            .timezone
            .unwrap_or_else(|| DEFAULT_TIMEZONE.to_owned());
        let now = self.clock.now();
        let next_at = CronSchedule::parse(&request.cron, &timezone)
            .and_then(|cron| cron.first_after(now))
            .map_err(|error| ServiceError::InvalidArgument(error.to_string()))?;
        let schedule = Cron {
            id: waft_store::new_id(),
            lambda: request.lambda,
            cron: request.cron,
            timezone,
            payload: request.payload,
            collection: request.collection,
            priority: request.priority,
            catch_up: request.catch_up,
            next_at,
            created_at: now,
        };
        self.store.cron_create(schedule.clone()).await?;
        tracing::info!(schedule = %schedule.id, lambda = %schedule.lambda, cron = %schedule.cron, timezone = %schedule.timezone, "periodic schedule created");
        Ok(schedule)
    }

    async fn cron_list(&self) -> ServiceResult<Vec<Cron>> {
        Ok(self.store.cron_list().await?)
    }

    async fn cron_preview(
        &self,
        cron: &str,
        timezone: Option<&str>,
        count: u32,
    ) -> ServiceResult<Vec<Millis>> {
        let invalid =
            |error: waft_core::cron::CronError| ServiceError::InvalidArgument(error.to_string());
        let schedule =
            CronSchedule::parse(cron, timezone.unwrap_or(DEFAULT_TIMEZONE)).map_err(invalid)?;
        let count = match count {
            0 => 5,
            n => n.min(100) as usize,
        };
        let mut next = schedule.first_after(self.clock.now()).map_err(invalid)?;
        let mut occurrences = vec![next];
        while occurrences.len() < count {
            match schedule.next_after(next) {
                Some(at) => {
                    occurrences.push(at);
                    next = at;
                }
                None => break,
            }
        }
        Ok(occurrences)
    }

    async fn cron_delete(&self, id: &str) -> ServiceResult<()> {
        if !self.store.cron_delete(id).await? {
            return Err(ServiceError::NotFound(format!("no periodic schedule {id}")));
        }
        tracing::info!(schedule = id, "periodic schedule deleted");
        Ok(())
    }

    async fn component_get(&self, digest: &str) -> ServiceResult<Vec<u8>> {
        self.store
            .component_get(digest)
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("no component with digest {digest}")))
    }

    async fn artifact_get(&self, digest: &str, engine: &str) -> ServiceResult<Option<Artifact>> {
        Ok(self.store.artifact_get(digest, engine).await?)
    }

    async fn lambda_changed(&self, seen: u64, wait: Duration) -> ServiceResult<u64> {
        let mut generation = self.generation.subscribe();
        let changed = generation.wait_for(|now| *now != seen);
        // The sender lives as long as `self`: waiting ends by a change or
        // the time.
        let _ = tokio::time::timeout(wait.min(MAX_CHANGE_WAIT), changed).await;
        Ok(*generation.borrow())
    }
}

/// A generation no earlier Frontend is likely to have answered: a client
/// that followed one before a restart sees a change at once.
fn first_generation() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos() as u64)
}
