//! The Frontend's client: what a Rust service uses to schedule and
//! inspect tasks ([`ClientApi`]; administration and the executors' calls
//! are in `admin.rs`).

use std::time::Duration;

use async_trait::async_trait;
use waft_core::model::*;
use waft_core::roles::{
    ClientApi, CronRequest, HistoryAnswer, HistoryQuery, JournalQuery, JournalSlice, TaskRequest,
};
use waft_core::{LambdaConfig, ServiceError, ServiceResult};

use super::{WaftChannel, answer};
use crate::MAX_FRONTEND_REQUEST;
use crate::convert::*;
use crate::proto;
use crate::status::from_status;

/// The Frontend, over gRPC.
#[derive(Clone)]
pub struct FrontendClient(pub(super) proto::frontend_client::FrontendClient<WaftChannel>);

impl FrontendClient {
    pub(super) const ROLE: &str = "Frontend";

    /// A client of the Frontend on `channel`.
    pub fn new(channel: WaftChannel) -> Self {
        Self(
            proto::frontend_client::FrontendClient::new(channel)
                // No limit of its own on what it sends: the Frontend's
                // refuses a request over it as too large, in so many words.
                .max_decoding_message_size(MAX_FRONTEND_REQUEST),
        )
    }

    pub(super) fn error(status: tonic::Status) -> ServiceError {
        from_status(status, Self::ROLE)
    }

    /// Deploys like [`ClientApi::lambda_deploy`], calling `report` with
    /// what the Frontend says while it works (about every second): how a
    /// command line shows a long deploy's progress.
    ///
    /// No fixed deadline cuts the deploy: it takes as long as checking and
    /// compiling the component takes. Only a Frontend silent for
    /// [`DEPLOY_SILENCE`] is given up on (`Unavailable`); the deploy may
    /// still complete there.
    pub async fn lambda_deploy_reporting(
        &self,
        name: &str,
        component: Vec<u8>,
        config: LambdaConfig,
        mut report: impl FnMut(DeployReport<'_>) + Send,
    ) -> ServiceResult<Lambda> {
        let request = proto::DeployLambdaRequest {
            name: name.to_owned(),
            component,
            config: Some(config_to_proto(&config)),
        };
        let mut reports = self
            .0
            .clone()
            .deploy_lambda(request)
            .await
            .map_err(Self::error)?
            .into_inner();
        loop {
            let next = tokio::time::timeout(DEPLOY_SILENCE, reports.message())
                .await
                .map_err(|_| {
                    ServiceError::Unavailable(format!(
                        "the {} sent nothing for {DEPLOY_SILENCE:?} during the deploy of {name}; \
                         `waft lambda versions {name}` shows whether it completed",
                        Self::ROLE
                    ))
                })?
                .map_err(Self::error)?;
            let Some(message) = next else {
                return Err(ServiceError::Internal(format!(
                    "the {} ended the deploy of {name} without an answer",
                    Self::ROLE
                )));
            };
            if let Some(lambda) = message.lambda {
                return lambda_from_proto(lambda);
            }
            report(DeployReport {
                stage: &message.stage,
                elapsed: Duration::from_millis(message.elapsed_ms),
            });
        }
    }
}

/// What a deploy at work reports.
#[derive(Debug, Clone, Copy)]
pub struct DeployReport<'a> {
    /// What it is doing ("checking and compiling").
    pub stage: &'a str,
    /// Since it began, on the Frontend.
    pub elapsed: Duration,
}

/// How long a deploy's Frontend may stay silent before the client gives up
/// on it: it reports every second while it works.
pub const DEPLOY_SILENCE: Duration = Duration::from_secs(30);

/// The largest compiled artifact a client accepts.
pub const MAX_ARTIFACT_BYTES: usize = 1 << 30;

#[async_trait]
impl ClientApi for FrontendClient {
    async fn task_schedule_many(
        &self,
        tasks: Vec<TaskRequest>,
    ) -> ServiceResult<Vec<TaskInserted>> {
        let request = proto::ScheduleBatchRequest {
            tasks: tasks.into_iter().map(new_task_to_proto).collect(),
        };
        let response = self
            .0
            .clone()
            .schedule_batch(request)
            .await
            .map_err(Self::error)?;
        Ok(response
            .into_inner()
            .tasks
            .into_iter()
            .map(|t| TaskInserted {
                id: t.id,
                created: t.created,
            })
            .collect())
    }

    async fn task_get(&self, id: &str) -> ServiceResult<Task> {
        let response = self
            .0
            .clone()
            .get_task(proto::GetTaskRequest { id: id.to_owned() })
            .await
            .map_err(Self::error)?;
        task_from_proto(answer(response.into_inner().task, Self::ROLE)?)
    }

    async fn task_list(&self, filter: TaskList) -> ServiceResult<Vec<Task>> {
        let request = proto::ListTasksRequest {
            lambda: filter.lambda,
            collection: filter.collection,
            key: filter.key,
            status: filter.status.map(|s| status_to_proto(s) as i32),
            parent_id: filter.parent_id,
            after: filter.after,
            limit: filter.limit,
            created_from_ms: filter.created_from,
            created_before_ms: filter.created_before,
            newest_first: filter.newest_first,
        };
        let response = self
            .0
            .clone()
            .list_tasks(request)
            .await
            .map_err(Self::error)?;
        response
            .into_inner()
            .tasks
            .into_iter()
            .map(task_from_proto)
            .collect()
    }

    async fn lambda_stats(&self, window: Duration) -> ServiceResult<Overview> {
        let response = self
            .0
            .clone()
            .lambda_stats(proto::LambdaStatsRequest {
                window_ms: u64::try_from(window.as_millis()).unwrap_or(u64::MAX),
            })
            .await
            .map_err(Self::error)?;
        overview_from_proto(response.into_inner())
    }

    async fn task_history(&self, query: HistoryQuery) -> ServiceResult<HistoryAnswer> {
        let response = self
            .0
            .clone()
            .task_history(history_query_to_proto(query))
            .await
            .map_err(Self::error)?;
        Ok(history_from_proto(response.into_inner()))
    }

    async fn task_count(&self, filter: TaskCount) -> ServiceResult<Vec<StatusCount>> {
        let request = proto::CountTasksRequest {
            lambda: filter.lambda,
            collection: filter.collection,
            parent_id: filter.parent_id,
            key: filter.key,
        };
        let response = self
            .0
            .clone()
            .count_tasks(request)
            .await
            .map_err(Self::error)?;
        response
            .into_inner()
            .counts
            .into_iter()
            .map(|c| {
                Ok(StatusCount {
                    status: status_from_proto(c.status)?,
                    count: c.count,
                })
            })
            .collect()
    }

    async fn task_cancel(&self, id: &str) -> ServiceResult<Task> {
        let response = self
            .0
            .clone()
            .cancel_task(proto::CancelTaskRequest { id: id.to_owned() })
            .await
            .map_err(Self::error)?;
        task_from_proto(answer(response.into_inner().task, Self::ROLE)?)
    }

    async fn task_signal(
        &self,
        id: &str,
        name: &str,
        payload: Vec<u8>,
    ) -> ServiceResult<SignalSent> {
        let response = self
            .0
            .clone()
            .signal_task(proto::SignalTaskRequest {
                id: id.to_owned(),
                name: name.to_owned(),
                payload,
            })
            .await
            .map_err(Self::error)?
            .into_inner();
        Ok(SignalSent {
            seq: response.seq,
            woke: response.woke,
        })
    }

    async fn lambda_deploy(
        &self,
        name: &str,
        component: Vec<u8>,
        config: LambdaConfig,
    ) -> ServiceResult<Lambda> {
        self.lambda_deploy_reporting(name, component, config, |_| {})
            .await
    }

    async fn lambda_check(
        &self,
        name: &str,
        component: Vec<u8>,
        config: LambdaConfig,
        progress: &(dyn Fn(CheckProgress) + Send + Sync),
    ) -> ServiceResult<DeployCheck> {
        super::checks::check(self, name, component, config, progress).await
    }

    async fn lambda_move(
        &self,
        name: &str,
        to: Option<u32>,
        progress: &(dyn Fn(CheckProgress) + Send + Sync),
    ) -> ServiceResult<MoveReport> {
        super::checks::move_waiting(self, name, to, progress).await
    }

    async fn lambda_get(&self, name: &str, version: Option<u32>) -> ServiceResult<Lambda> {
        let request = proto::GetLambdaRequest {
            name: name.to_owned(),
            version,
        };
        let response = self
            .0
            .clone()
            .get_lambda(request)
            .await
            .map_err(Self::error)?;
        lambda_from_proto(answer(response.into_inner().lambda, Self::ROLE)?)
    }

    async fn lambda_rollback(&self, name: &str, to: Option<u32>) -> ServiceResult<Lambda> {
        let response = self
            .0
            .clone()
            .rollback_lambda(proto::RollbackLambdaRequest {
                name: name.to_owned(),
                version: to,
            })
            .await
            .map_err(Self::error)?;
        lambda_from_proto(answer(response.into_inner().lambda, Self::ROLE)?)
    }

    async fn lambda_delete(&self, name: &str, drop_tasks: bool) -> ServiceResult<LambdaDeleted> {
        let response = self
            .0
            .clone()
            .delete_lambda(proto::DeleteLambdaRequest {
                name: name.to_owned(),
                drop_tasks,
            })
            .await
            .map_err(Self::error)?
            .into_inner();
        Ok(LambdaDeleted {
            tasks: response.tasks,
            live: response.live,
        })
    }

    async fn lambda_versions(&self, name: &str) -> ServiceResult<Vec<LambdaVersion>> {
        let response = self
            .0
            .clone()
            .list_versions(proto::ListVersionsRequest {
                name: name.to_owned(),
            })
            .await
            .map_err(Self::error)?
            .into_inner();
        // An older Frontend sends no uses: none known.
        let mut uses = response.uses.into_iter();
        response
            .versions
            .into_iter()
            .map(|lambda| {
                let used = uses.next().unwrap_or_default();
                Ok(LambdaVersion {
                    lambda: lambda_from_proto(lambda)?,
                    suspended: used.suspended,
                    live: used.live,
                })
            })
            .collect()
    }

    async fn lambda_list(&self) -> ServiceResult<Vec<Lambda>> {
        let response = self
            .0
            .clone()
            .list_lambdas(proto::ListLambdasRequest {})
            .await
            .map_err(Self::error)?;
        response
            .into_inner()
            .lambdas
            .into_iter()
            .map(lambda_from_proto)
            .collect()
    }

    async fn gate_set(
        &self,
        lambda: &str,
        collection: Option<&str>,
        state: GateState,
    ) -> ServiceResult<u64> {
        let request = proto::SetGateRequest {
            lambda: lambda.to_owned(),
            collection: collection.map(str::to_owned),
            state: gate_state_to_proto(state) as i32,
        };
        let response = self
            .0
            .clone()
            .set_gate(request)
            .await
            .map_err(Self::error)?;
        Ok(response.into_inner().released)
    }

    async fn gate_list(&self) -> ServiceResult<Vec<Gate>> {
        let response = self
            .0
            .clone()
            .list_gates(proto::ListGatesRequest {})
            .await
            .map_err(Self::error)?;
        response
            .into_inner()
            .gates
            .into_iter()
            .map(gate_from_proto)
            .collect()
    }

    async fn dead_redrive(
        &self,
        selector: DeadSelector,
        version: Option<u32>,
        fresh: bool,
    ) -> ServiceResult<u64> {
        let request = match selector {
            DeadSelector::Ids(ids) => proto::RedriveDeadRequest {
                ids,
                version,
                fresh,
                ..Default::default()
            },
            DeadSelector::Filter { lambda, collection } => proto::RedriveDeadRequest {
                ids: Vec::new(),
                lambda: Some(lambda),
                collection,
                version,
                fresh,
            },
        };
        let response = self
            .0
            .clone()
            .redrive_dead(request)
            .await
            .map_err(Self::error)?;
        Ok(response.into_inner().redriven)
    }

    async fn dead_purge(&self, selector: DeadSelector) -> ServiceResult<u64> {
        let request = match selector {
            DeadSelector::Ids(ids) => proto::PurgeDeadRequest {
                ids,
                ..Default::default()
            },
            DeadSelector::Filter { lambda, collection } => proto::PurgeDeadRequest {
                ids: Vec::new(),
                lambda: Some(lambda),
                collection,
            },
        };
        let response = self
            .0
            .clone()
            .purge_dead(request)
            .await
            .map_err(Self::error)?;
        Ok(response.into_inner().purged)
    }

    async fn task_attempts(&self, id: &str) -> ServiceResult<Vec<Attempt>> {
        let response = self
            .0
            .clone()
            .list_attempts(proto::ListAttemptsRequest { id: id.to_owned() })
            .await
            .map_err(Self::error)?;
        response
            .into_inner()
            .attempts
            .into_iter()
            .map(attempt_from_proto)
            .collect()
    }

    async fn task_journal_page(&self, query: JournalQuery) -> ServiceResult<JournalSlice> {
        let response = self
            .0
            .clone()
            .get_journal(proto::GetJournalRequest {
                id: query.id,
                answers: query.answers,
                from: query.from,
                limit: query.limit,
            })
            .await
            .map_err(Self::error)?
            .into_inner();
        Ok(JournalSlice {
            entries: response
                .entries
                .into_iter()
                .map(journal_entry_from_proto)
                .collect(),
            next: response.next,
        })
    }

    async fn cron_create(&self, request: CronRequest) -> ServiceResult<Cron> {
        let response = self
            .0
            .clone()
            .create_cron(cron_request_to_proto(request))
            .await
            .map_err(Self::error)?;
        cron_from_proto(required(response.into_inner().cron, "cron")?)
    }

    async fn cron_preview(
        &self,
        cron: &str,
        timezone: Option<&str>,
        count: u32,
    ) -> ServiceResult<Vec<Millis>> {
        let response = self
            .0
            .clone()
            .preview_cron(proto::PreviewCronRequest {
                expression: cron.to_owned(),
                timezone: timezone.map(str::to_owned),
                count,
            })
            .await
            .map_err(Self::error)?;
        Ok(response.into_inner().occurrences_ms)
    }

    async fn cron_list(&self) -> ServiceResult<Vec<Cron>> {
        let response = self
            .0
            .clone()
            .list_crons(proto::ListCronsRequest {})
            .await
            .map_err(Self::error)?;
        response
            .into_inner()
            .crons
            .into_iter()
            .map(cron_from_proto)
            .collect()
    }

    async fn cron_delete(&self, id: &str) -> ServiceResult<()> {
        self.0
            .clone()
            .delete_cron(proto::DeleteCronRequest { id: id.to_owned() })
            .await
            .map_err(Self::error)?;
        Ok(())
    }
}
