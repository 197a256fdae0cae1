//! The Frontend's face to clients ([`ClientApi`]): scheduling and
//! inspecting tasks, deploying lambdas, gates, dead tasks and crons. Each
//! call checks its caller first (`access.rs`), here, where a reader sees
//! every check at a glance; the larger calls then go on beside it
//! (`schedule.rs`, `journal.rs`, `crons.rs`).

use std::time::Duration;

use async_trait::async_trait;
use waft_core::LambdaConfig;
use waft_core::access::{Action, Call};
use waft_runtime::Digest;
use waft_store::{
    Attempt, CheckProgress, Cron, DeadPurge, DeadRedrive, DeadSelector, DeployCheck, Gate, GateSet,
    GateState, HistoryRead, Lambda, LambdaDelete, LambdaDeleted, LambdaDeploy, LambdaRollback,
    LambdaVersion, MINUTE, Millis, MoveReport, Overview, SignalSent, StatusCount, Task, TaskCount,
    TaskInserted, TaskList, TaskSignal, history_points, minute_of,
};

use super::{Frontend, history};

/// Dead letters a purge deletes per transaction.
const PURGE_BATCH: u32 = 1000;
use crate::api::ClientApi;
use crate::api::{JournalQuery, JournalSlice};
use crate::{
    CronRequest, HistoryAnswer, HistoryQuery, ServiceError, ServiceResult, TaskRequest, metrics,
};

#[async_trait]
impl ClientApi for Frontend {
    async fn task_schedule_many(
        &self,
        tasks: Vec<TaskRequest>,
    ) -> ServiceResult<Vec<TaskInserted>> {
        self.allow_schedule(&tasks).await?;
        self.store_tasks(tasks).await
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
        self.journal_page(query).await
    }

    async fn lambda_deploy(
        &self,
        name: &str,
        component: Vec<u8>,
        config: LambdaConfig,
    ) -> ServiceResult<Lambda> {
        self.allow_deploy(name, &config)?;
        let prepared = self.prepare(name, &component, &config).await?;
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

    async fn lambda_check(
        &self,
        name: &str,
        component: Vec<u8>,
        config: LambdaConfig,
        progress: &(dyn Fn(CheckProgress) + Send + Sync),
    ) -> ServiceResult<DeployCheck> {
        self.allow(Call::LambdaCheck, Some(name))?;
        let prepared = self.prepare(name, &component, &config).await?;
        let (check, _) = self
            .check_replays(name, prepared, &config, progress)
            .await?;
        Ok(check)
    }

    async fn lambda_move(
        &self,
        name: &str,
        to: Option<u32>,
        progress: &(dyn Fn(CheckProgress) + Send + Sync),
    ) -> ServiceResult<MoveReport> {
        self.allow(Call::LambdaMove, Some(name))?;
        self.move_clean(name, to, progress).await
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
        self.store_cron(request).await
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
        self.cron_occurrences(cron, timezone, count)
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
