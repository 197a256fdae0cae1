//! The Frontend's face to clients ([`ClientApi`]): scheduling and
//! inspecting tasks, deploying lambdas, gates, dead tasks and crons. Each
//! call checks its caller first (`access.rs`).

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use waft_core::access::{Action, Call};
use waft_core::cron::DEFAULT_TIMEZONE;
use waft_core::limits::check_payload;
use waft_core::{CronSchedule, LambdaConfig};
use waft_runtime::Digest;
use waft_store::{
    Attempt, Cron, DeadPurge, DeadRedrive, DeadSelector, Gate, GateSet, GateState, HistoryRead,
    JournalEntry, Lambda, LambdaDelete, LambdaDeleted, LambdaDeploy, LambdaRollback, LambdaVersion,
    MINUTE, Millis, NewTask, Overview, SignalSent, StatusCount, Task, TaskCount, TaskInsertMany,
    TaskInserted, TaskList, TaskSignal, history_points, minute_of,
};

use super::masking::Masker;
use super::{Frontend, MAX_COMPONENT_BYTES, MAX_TASKS_PER_REQUEST, history};

/// Dead letters a purge deletes per transaction.
const PURGE_BATCH: u32 = 1000;
use crate::api::ClientApi;
use crate::api::{JournalQuery, JournalSlice};
use crate::{
    CronRequest, HistoryAnswer, HistoryQuery, RunAt, ServiceError, ServiceResult, TaskRequest,
    metrics, spans,
};

#[async_trait]
impl ClientApi for Frontend {
    async fn task_schedule_many(
        &self,
        tasks: Vec<TaskRequest>,
    ) -> ServiceResult<Vec<TaskInserted>> {
        self.allow_schedule(&tasks).await?;
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
        let (mut tasks, earliest) = new_tasks(tasks, now)?;
        let spans = schedule_spans(&mut tasks);
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
                spans.iter().for_each(spans::failed);
                return Err(error.into());
            }
        };
        for (span, task) in spans.iter().zip(&inserted) {
            span.record("messaging.message.id", task.id.as_str());
            span.record("waft.task.id", task.id.as_str());
        }
        count_scheduled(&lambdas, &inserted);
        if let Some(at) = earliest {
            self.due.due(at).await;
        }
        Ok(inserted)
    }

    async fn task_get(&self, id: &str) -> ServiceResult<Task> {
        let task = self.task_find(id).await?;
        self.allow(Call::TaskGet, Some(&task.lambda))?;
        Ok(task)
    }

    async fn task_list(&self, mut filter: TaskList) -> ServiceResult<Vec<Task>> {
        self.allow(Call::TaskList, filter.lambda.as_deref())?;
        filter.lambdas = self.scope(Call::TaskList, filter.lambdas.take());
        let tasks = self.store.task_list(filter).await?;
        // Checked again, in case the store answers beyond the filter: a
        // page may then come short, but never shows another's task.
        Ok(self.keep(Call::TaskList, tasks, |task| &task.lambda))
    }

    async fn task_count(&self, filter: TaskCount) -> ServiceResult<Vec<StatusCount>> {
        self.allow(Call::TaskCount, Some(&filter.lambda))?;
        Ok(self.store.task_count(filter).await?)
    }

    async fn lambda_stats(&self, window: Duration) -> ServiceResult<Overview> {
        let now = self.clock.now();
        let window = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
        let lambdas = self
            .store
            .lambda_stats(now, now.saturating_sub(window))
            .await?;
        let lambdas = self.keep(Call::LambdaStats, lambdas, |stats| &stats.lambda);
        Ok(Overview { now, lambdas })
    }

    async fn task_history(&self, query: HistoryQuery) -> ServiceResult<HistoryAnswer> {
        self.allow(Call::TaskHistory, query.lambda.as_deref())?;
        let step = history::step(&query)?;
        // Steps aligned on the clock, the last holding the current minute.
        let step_ms = history::millis(step);
        let to = (minute_of(self.clock.now()) + MINUTE + step_ms - 1).div_euclid(step_ms) * step_ms;
        let from = to - history::millis(query.range);
        // Every lambda the caller may read: all at once, or each of its own.
        let lambdas = match (&query.lambda, self.who.lambdas(Action::Read)) {
            (Some(lambda), _) => vec![Some(lambda.clone())],
            (None, None) => vec![None],
            (None, Some(own)) => own.into_iter().map(Some).collect(),
        };
        let mut minutes = Vec::new();
        let several = lambdas.len() > 1;
        for lambda in lambdas {
            minutes.extend(
                self.store
                    .history_read(HistoryRead { lambda, from, to })
                    .await?,
            );
        }
        if several {
            minutes = history::add_lambdas(minutes);
        }
        Ok(HistoryAnswer {
            step,
            points: history_points(&minutes, from, to, step_ms),
        })
    }

    async fn task_cancel(&self, id: &str) -> ServiceResult<Task> {
        self.allow_task(Call::TaskCancel, id).await?;
        Ok(self.store.task_cancel(id, self.clock.now()).await?)
    }

    async fn task_signal(
        &self,
        id: &str,
        name: &str,
        payload: Vec<u8>,
    ) -> ServiceResult<SignalSent> {
        self.allow_task(Call::TaskSignal, id).await?;
        let now = self.clock.now();
        let signal = TaskSignal {
            id: id.to_owned(),
            name: name.to_owned(),
            payload,
            now,
        };
        let sent = self.store.task_signal(signal).await?;
        if sent.woke {
            // Due at once: the Store Consumer need not wait for its next poll.
            self.due.due(now).await;
        }
        Ok(sent)
    }

    async fn task_attempts(&self, id: &str) -> ServiceResult<Vec<Attempt>> {
        self.allow_task(Call::TaskAttempts, id).await?;
        let attempts = self.store.attempt_list(id).await?;
        if attempts.is_empty() && self.store.task_get(id).await?.is_none() {
            return Err(ServiceError::NotFound(format!("no task {id}")));
        }
        Ok(attempts)
    }

    async fn task_journal_page(&self, query: JournalQuery) -> ServiceResult<JournalSlice> {
        let call = if query.answers {
            Call::TaskJournalAnswers
        } else {
            Call::TaskJournal
        };
        self.allow_task(call, &query.id).await?;
        let values = if query.answers {
            self.secret_values(&query.id).await?
        } else {
            Vec::new()
        };
        let slice = self.journal_slice(&query).await?;
        if slice.entries.is_empty() && self.store.task_get(&query.id).await?.is_none() {
            return Err(ServiceError::NotFound(format!("no task {}", query.id)));
        }
        if !query.answers {
            // Kept out unless asked for, whatever the store answers: it
            // may hold a response's body.
            let entries = slice.entries.into_iter();
            let entries = entries.map(|entry| JournalEntry {
                answer: Vec::new(),
                ..entry
            });
            return Ok(JournalSlice {
                entries: entries.collect(),
                ..slice
            });
        }
        if values.is_empty() {
            return Ok(slice);
        }
        // Linear in the page's bytes, but megabytes of them: off the
        // threads that serve every other call.
        tokio::task::spawn_blocking(move || {
            let masker = Masker::new(&values);
            let entries = slice.entries.into_iter();
            let entries = entries.map(|entry| JournalEntry {
                answer: masker.masked(entry.answer),
                ..entry
            });
            JournalSlice {
                entries: entries.collect(),
                ..slice
            }
        })
        .await
        .map_err(|e| ServiceError::Internal(format!("masking a journal's answers: {e}")))
    }

    async fn lambda_deploy(
        &self,
        name: &str,
        component: Vec<u8>,
        config: LambdaConfig,
    ) -> ServiceResult<Lambda> {
        self.allow_deploy(name, &config)?;
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
        self.allow(Call::LambdaRollback, Some(name))?;
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

    async fn lambda_delete(&self, name: &str, drop_tasks: bool) -> ServiceResult<LambdaDeleted> {
        self.allow(Call::LambdaDelete, Some(name))?;
        let deleted = self
            .store
            .lambda_delete(LambdaDelete {
                name: name.to_owned(),
                drop_tasks,
            })
            .await?;
        tracing::info!(
            lambda = name,
            tasks = deleted.tasks,
            live = deleted.live,
            "deleted"
        );
        self.lambdas_changed().await;
        Ok(deleted)
    }

    async fn lambda_versions(&self, name: &str) -> ServiceResult<Vec<LambdaVersion>> {
        self.allow(Call::LambdaVersions, Some(name))?;
        Ok(self.store.lambda_versions(name).await?)
    }

    async fn lambda_get(&self, name: &str, version: Option<u32>) -> ServiceResult<Lambda> {
        self.allow(Call::LambdaGet, Some(name))?;
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
        let lambdas = self.store.lambda_list().await?;
        Ok(self.keep(Call::LambdaList, lambdas, |lambda| &lambda.name))
    }

    async fn gate_set(
        &self,
        lambda: &str,
        collection: Option<&str>,
        state: GateState,
    ) -> ServiceResult<u64> {
        self.allow(Call::GateSet, Some(lambda))?;
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
        let gates = self.store.gate_list().await?;
        Ok(self.keep(Call::GateList, gates, |gate| &gate.lambda))
    }

    async fn dead_redrive(
        &self,
        selector: DeadSelector,
        version: Option<u32>,
        fresh: bool,
    ) -> ServiceResult<u64> {
        match &selector {
            DeadSelector::Ids(ids) => {
                for id in ids {
                    self.allow_task(Call::DeadRedrive, id).await?;
                }
            }
            DeadSelector::Filter { lambda, .. } => self.allow(Call::DeadRedrive, Some(lambda))?,
        }
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
                fresh,
                now: self.clock.now(),
            })
            .await?;
        if redriven > 0 {
            self.due.due(self.clock.now()).await;
        }
        Ok(redriven)
    }

    async fn dead_purge(&self, selector: DeadSelector) -> ServiceResult<u64> {
        match &selector {
            DeadSelector::Ids(ids) => {
                for id in ids {
                    self.allow_task(Call::DeadPurge, id).await?;
                }
            }
            DeadSelector::Filter { lambda, .. } => self.allow(Call::DeadPurge, Some(lambda))?,
        }
        if matches!(&selector, DeadSelector::Ids(ids) if ids.is_empty()) {
            return Err(ServiceError::InvalidArgument(
                "name the dead tasks to purge, or a lambda".into(),
            ));
        }
        // A lambda's dead letters go a bounded batch per transaction, so a
        // large purge never holds the store for long.
        let mut purged = 0;
        loop {
            let batch = self
                .store
                .dead_purge(DeadPurge {
                    selector: selector.clone(),
                    limit: PURGE_BATCH,
                })
                .await?;
            purged += batch.tasks;
            metrics::metrics().purged.inc_by(batch.tasks);
            if !batch.more || matches!(selector, DeadSelector::Ids(_)) {
                return Ok(purged);
            }
        }
    }

    async fn cron_create(&self, request: CronRequest) -> ServiceResult<Cron> {
        self.allow(Call::CronCreate, Some(&request.lambda))?;
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
            key: request.key,
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
        let crons = self.store.cron_list().await?;
        Ok(self.keep(Call::CronList, crons, |cron| &cron.lambda))
    }

    async fn cron_preview(
        &self,
        cron: &str,
        timezone: Option<&str>,
        count: u32,
    ) -> ServiceResult<Vec<Millis>> {
        self.allow(Call::CronPreview, None)?;
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
        // An unknown schedule is left to the store to say so.
        if !self.who.is_admin()
            && let Some(cron) = self.store.cron_list().await?.iter().find(|c| c.id == id)
        {
            self.allow(Call::CronDelete, Some(&cron.lambda))?;
        }
        if !self.store.cron_delete(id).await? {
            return Err(ServiceError::NotFound(format!("no periodic schedule {id}")));
        }
        tracing::info!(schedule = id, "periodic schedule deleted");
        Ok(())
    }
}

/// The tasks to store for `tasks` at `now`, and the earliest time one of
/// them comes due; refuses a payload over the limit, or a delay too long.
fn new_tasks(
    tasks: Vec<TaskRequest>,
    now: Millis,
) -> ServiceResult<(Vec<NewTask>, Option<Millis>)> {
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
            let window = task.debounce.map_or(0, |window| {
                i64::try_from(window.as_millis()).unwrap_or(i64::MAX)
            });
            let due = run_at.map_or(now, |at| at.max(now)).saturating_add(window);
            earliest = Some(earliest.map_or(due, |e| e.min(due)));
            Ok(NewTask {
                lambda: task.lambda,
                collection: task.collection,
                priority: task.priority,
                payload: task.payload,
                run_at,
                idempotency_key: task.idempotency_key,
                key: task.key,
                debounce: task.debounce,
                parent_id: task.parent_id,
                version: task.version,
                parent_lease: task.parent_lease,
                continuation: task.then,
                trace: task.trace,
                id: task.id,
            })
        })
        .collect::<ServiceResult<Vec<_>>>()?;
    Ok((tasks, earliest))
}

/// A `schedule` span per task, each a child of the task's trace context
/// (or the root of a new trace), which the task then keeps in its stead:
/// the steps after the store write are the span's children. Untraced,
/// the client's context is kept as it came.
fn schedule_spans(tasks: &mut [NewTask]) -> Vec<tracing::Span> {
    tasks
        .iter_mut()
        .map(|task| {
            let span = spans::schedule(&task.lambda, task.trace.as_ref());
            if let Some(trace) = waft_telemetry::context_of(&span) {
                task.trace = Some(trace);
            }
            span
        })
        .collect()
}

/// Counts the tasks created among `inserted` (of `lambdas`, in order).
/// Counted per lambda, not per task: each count takes the metric family's
/// lock.
fn count_scheduled(lambdas: &[String], inserted: &[TaskInserted]) {
    let mut created: BTreeMap<&str, u64> = BTreeMap::new();
    for (lambda, task) in lambdas.iter().zip(inserted) {
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
}
