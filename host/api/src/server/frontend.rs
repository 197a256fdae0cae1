//! The Frontend's adapter: every client call, authorized by the caller's
//! token before it reaches the role (the checks that need the store's
//! answers first are in `authorize.rs`).

use std::sync::Arc;
use std::time::Duration;

use tonic::{Request, Response, Status};
use waft_client::convert::*;
use waft_client::proto;
use waft_client::status::to_status;
use waft_services::FrontendApi;
use waft_services::auth::Action;
use waft_store::{DeadSelector, TaskCount, TaskList};

use crate::auth::principal;

/// The Frontend over gRPC.
pub struct FrontendService(pub Arc<dyn FrontendApi>);

/// A streamed answer.
pub type Progress<T> =
    std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<T, Status>> + Send>>;

/// Bytes of an artifact per message: well under every message limit.
const ARTIFACT_CHUNK: usize = 2 << 20;

/// How often a deploy at work reports.
const DEPLOY_REPORT_EVERY: Duration = Duration::from_secs(1);

/// Reports on `deploy` every second until it ends, then its answer.
async fn report_deploy(
    mut deploy: tokio::task::JoinHandle<waft_services::ServiceResult<waft_store::Lambda>>,
    sender: tokio::sync::mpsc::Sender<Result<proto::DeployLambdaResponse, Status>>,
) {
    let started = std::time::Instant::now();
    let elapsed_ms = || u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let mut ticks = tokio::time::interval(DEPLOY_REPORT_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let answer = loop {
        tokio::select! {
            joined = &mut deploy => break joined,
            _ = ticks.tick() => {
                let report = proto::DeployLambdaResponse {
                    stage: "checking and compiling".into(),
                    elapsed_ms: elapsed_ms(),
                    lambda: None,
                };
                // The client left: the deploy still runs to its end.
                let _ = sender.send(Ok(report)).await;
            }
        }
    };
    let last = match answer {
        Ok(Ok(lambda)) => Ok(proto::DeployLambdaResponse {
            stage: String::new(),
            elapsed_ms: elapsed_ms(),
            lambda: Some(lambda_to_proto(lambda)),
        }),
        Ok(Err(error)) => Err(to_status(error)),
        Err(error) => Err(Status::internal(format!("the deploy stopped: {error}"))),
    };
    let _ = sender.send(last).await;
}

#[tonic::async_trait]
impl proto::frontend_server::Frontend for FrontendService {
    async fn schedule(
        &self,
        request: Request<proto::ScheduleRequest>,
    ) -> Result<Response<proto::ScheduleResponse>, Status> {
        let who = principal(&request);
        let task = required(request.into_inner().task, "task").map_err(to_status)?;
        let task = new_task_from_proto(task).map_err(to_status)?;
        self.check_schedule(&who, std::slice::from_ref(&task))
            .await?;
        let mut inserted = self
            .0
            .task_schedule_many(vec![task])
            .await
            .map_err(to_status)?;
        let inserted = inserted
            .pop()
            .ok_or_else(|| Status::internal("the store answered no task"))?;
        Ok(Response::new(proto::ScheduleResponse {
            id: inserted.id,
            created: inserted.created,
        }))
    }

    async fn schedule_batch(
        &self,
        request: Request<proto::ScheduleBatchRequest>,
    ) -> Result<Response<proto::ScheduleBatchResponse>, Status> {
        let who = principal(&request);
        let tasks = request
            .into_inner()
            .tasks
            .into_iter()
            .map(new_task_from_proto)
            .collect::<Result<Vec<_>, _>>()
            .map_err(to_status)?;
        self.check_schedule(&who, &tasks).await?;
        let inserted = self.0.task_schedule_many(tasks).await.map_err(to_status)?;
        Ok(Response::new(proto::ScheduleBatchResponse {
            tasks: inserted
                .into_iter()
                .map(|t| proto::ScheduleResponse {
                    id: t.id,
                    created: t.created,
                })
                .collect(),
        }))
    }

    async fn get_task(
        &self,
        request: Request<proto::GetTaskRequest>,
    ) -> Result<Response<proto::GetTaskResponse>, Status> {
        let who = principal(&request);
        let task = self
            .0
            .task_get(&request.into_inner().id)
            .await
            .map_err(to_status)?;
        who.check(Action::Read, &task.lambda).map_err(to_status)?;
        Ok(Response::new(proto::GetTaskResponse {
            task: Some(task_to_proto(task)),
        }))
    }

    async fn list_tasks(
        &self,
        request: Request<proto::ListTasksRequest>,
    ) -> Result<Response<proto::ListTasksResponse>, Status> {
        let who = principal(&request);
        let request = request.into_inner();
        if let Some(lambda) = &request.lambda {
            who.check(Action::Read, lambda).map_err(to_status)?;
        }
        let filter = TaskList {
            status: request
                .status
                .map(status_from_proto)
                .transpose()
                .map_err(to_status)?,
            lambda: request.lambda,
            // In the query, so that a page holds `limit` of the tasks the
            // token may read, not what is left of every lambda's.
            lambdas: who.lambdas(Action::Read),
            collection: request.collection,
            parent_id: request.parent_id,
            created_from: request.created_from_ms,
            created_before: request.created_before_ms,
            newest_first: request.newest_first,
            after: request.after,
            limit: request.limit,
        };
        let tasks = self.0.task_list(filter).await.map_err(to_status)?;
        Ok(Response::new(proto::ListTasksResponse {
            // Checked again, in case a role answers beyond the filter:
            // a page may then come short, but never shows another's task.
            tasks: tasks
                .into_iter()
                .filter(|task| who.may(Action::Read, &task.lambda))
                .map(task_to_proto)
                .collect(),
        }))
    }

    async fn lambda_stats(
        &self,
        request: Request<proto::LambdaStatsRequest>,
    ) -> Result<Response<proto::LambdaStatsResponse>, Status> {
        let who = principal(&request);
        let window = match request.into_inner().window_ms {
            0 => Duration::from_secs(3600),
            ms => Duration::from_millis(ms),
        };
        let mut overview = self.0.lambda_stats(window).await.map_err(to_status)?;
        overview
            .lambdas
            .retain(|stats| who.may(Action::Read, &stats.lambda));
        Ok(Response::new(overview_to_proto(overview)))
    }

    async fn count_tasks(
        &self,
        request: Request<proto::CountTasksRequest>,
    ) -> Result<Response<proto::CountTasksResponse>, Status> {
        let who = principal(&request);
        let request = request.into_inner();
        who.check(Action::Read, &request.lambda)
            .map_err(to_status)?;
        let counts = self
            .0
            .task_count(TaskCount {
                lambda: request.lambda,
                collection: request.collection,
                parent_id: request.parent_id,
            })
            .await
            .map_err(to_status)?;
        Ok(Response::new(proto::CountTasksResponse {
            counts: counts
                .into_iter()
                .map(|c| proto::StatusCount {
                    status: status_to_proto(c.status) as i32,
                    count: c.count,
                })
                .collect(),
        }))
    }

    async fn cancel_task(
        &self,
        request: Request<proto::CancelTaskRequest>,
    ) -> Result<Response<proto::CancelTaskResponse>, Status> {
        let who = principal(&request);
        let id = request.into_inner().id;
        self.check_task(&who, Action::Manage, &id).await?;
        let task = self.0.task_cancel(&id).await.map_err(to_status)?;
        Ok(Response::new(proto::CancelTaskResponse {
            task: Some(task_to_proto(task)),
        }))
    }

    type DeployLambdaStream = Progress<proto::DeployLambdaResponse>;
    type GetArtifactStream = Progress<proto::GetArtifactResponse>;

    async fn deploy_lambda(
        &self,
        request: Request<proto::DeployLambdaRequest>,
    ) -> Result<Response<Self::DeployLambdaStream>, Status> {
        let who = principal(&request);
        let request = request.into_inner();
        who.check(Action::Manage, &request.name)
            .map_err(to_status)?;
        let config = config_from_proto(request.config).map_err(to_status)?;
        // Allowing a lambda to schedule another's tasks hands on the
        // deployer's right to schedule them: a right the deployer must have.
        for child in &config.allowed_children {
            who.check(Action::Schedule, child).map_err(to_status)?;
        }
        // The deploy runs on a task of its own, to its end even if the
        // client leaves (it is one transaction: stored whole or not at
        // all); the answer reports on it every second meanwhile.
        let frontend = self.0.clone();
        let deploy = tokio::spawn(async move {
            frontend
                .lambda_deploy(&request.name, request.component, config)
                .await
        });
        let (sender, receiver) = tokio::sync::mpsc::channel(4);
        tokio::spawn(report_deploy(deploy, sender));
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(receiver),
        )))
    }

    async fn get_lambda(
        &self,
        request: Request<proto::GetLambdaRequest>,
    ) -> Result<Response<proto::GetLambdaResponse>, Status> {
        let who = principal(&request);
        let request = request.into_inner();
        who.check(Action::Read, &request.name).map_err(to_status)?;
        let lambda = self
            .0
            .lambda_get(&request.name, request.version)
            .await
            .map_err(to_status)?;
        Ok(Response::new(proto::GetLambdaResponse {
            lambda: Some(lambda_to_proto(lambda)),
        }))
    }

    async fn list_lambdas(
        &self,
        request: Request<proto::ListLambdasRequest>,
    ) -> Result<Response<proto::ListLambdasResponse>, Status> {
        let who = principal(&request);
        let lambdas = self.0.lambda_list().await.map_err(to_status)?;
        Ok(Response::new(proto::ListLambdasResponse {
            lambdas: lambdas
                .into_iter()
                .filter(|lambda| who.may(Action::Read, &lambda.name))
                .map(lambda_to_proto)
                .collect(),
        }))
    }

    async fn rollback_lambda(
        &self,
        request: Request<proto::RollbackLambdaRequest>,
    ) -> Result<Response<proto::RollbackLambdaResponse>, Status> {
        let who = principal(&request);
        let request = request.into_inner();
        who.check(Action::Manage, &request.name)
            .map_err(to_status)?;
        let lambda = self
            .0
            .lambda_rollback(&request.name, request.version)
            .await
            .map_err(to_status)?;
        Ok(Response::new(proto::RollbackLambdaResponse {
            lambda: Some(lambda_to_proto(lambda)),
        }))
    }

    async fn list_versions(
        &self,
        request: Request<proto::ListVersionsRequest>,
    ) -> Result<Response<proto::ListVersionsResponse>, Status> {
        let who = principal(&request);
        let name = request.into_inner().name;
        who.check(Action::Read, &name).map_err(to_status)?;
        let versions = self.0.lambda_versions(&name).await.map_err(to_status)?;
        Ok(Response::new(proto::ListVersionsResponse {
            versions: versions.into_iter().map(lambda_to_proto).collect(),
        }))
    }

    async fn get_component(
        &self,
        request: Request<proto::GetComponentRequest>,
    ) -> Result<Response<proto::GetComponentResponse>, Status> {
        principal(&request)
            .check_admin("fetch components")
            .map_err(to_status)?;
        let component = self
            .0
            .component_get(&request.into_inner().digest)
            .await
            .map_err(to_status)?;
        Ok(Response::new(proto::GetComponentResponse { component }))
    }

    async fn get_artifact(
        &self,
        request: Request<proto::GetArtifactRequest>,
    ) -> Result<Response<Self::GetArtifactStream>, Status> {
        principal(&request)
            .check_admin("fetch compiled components")
            .map_err(to_status)?;
        let request = request.into_inner();
        let artifact = self
            .0
            .artifact_get(&request.digest, &request.engine)
            .await
            .map_err(to_status)?
            .ok_or_else(|| {
                Status::not_found(format!(
                    "no artifact of component {} for engine {}",
                    request.digest, request.engine
                ))
            })?;
        let size = artifact.bytes.len() as u64;
        let mut seal = Some(artifact.seal);
        let chunks: Vec<_> = artifact
            .bytes
            .chunks(ARTIFACT_CHUNK)
            .map(|chunk| {
                Ok(proto::GetArtifactResponse {
                    seal: seal.take().unwrap_or_default(),
                    size,
                    chunk: chunk.to_vec(),
                })
            })
            .collect();
        Ok(Response::new(Box::pin(tokio_stream::iter(chunks))))
    }

    async fn wait_lambda_change(
        &self,
        request: Request<proto::WaitLambdaChangeRequest>,
    ) -> Result<Response<proto::WaitLambdaChangeResponse>, Status> {
        principal(&request)
            .check_admin("follow the lambdas' changes")
            .map_err(to_status)?;
        let request = request.into_inner();
        let generation = self
            .0
            .lambda_changed(request.seen, Duration::from_millis(request.wait_ms))
            .await
            .map_err(to_status)?;
        Ok(Response::new(proto::WaitLambdaChangeResponse {
            generation,
        }))
    }

    async fn set_gate(
        &self,
        request: Request<proto::SetGateRequest>,
    ) -> Result<Response<proto::SetGateResponse>, Status> {
        let who = principal(&request);
        let request = request.into_inner();
        who.check(Action::Manage, &request.lambda)
            .map_err(to_status)?;
        let state = gate_state_from_proto(request.state).map_err(to_status)?;
        let released = self
            .0
            .gate_set(&request.lambda, request.collection.as_deref(), state)
            .await
            .map_err(to_status)?;
        Ok(Response::new(proto::SetGateResponse { released }))
    }

    async fn list_gates(
        &self,
        request: Request<proto::ListGatesRequest>,
    ) -> Result<Response<proto::ListGatesResponse>, Status> {
        let who = principal(&request);
        let gates = self.0.gate_list().await.map_err(to_status)?;
        Ok(Response::new(proto::ListGatesResponse {
            gates: gates
                .into_iter()
                .filter(|gate| who.may(Action::Read, &gate.lambda))
                .map(gate_to_proto)
                .collect(),
        }))
    }

    async fn redrive_dead(
        &self,
        request: Request<proto::RedriveDeadRequest>,
    ) -> Result<Response<proto::RedriveDeadResponse>, Status> {
        let who = principal(&request);
        let request = request.into_inner();
        let version = request.version;
        let selector = dead_selector(request)?;
        match &selector {
            DeadSelector::Ids(ids) => {
                for id in ids {
                    self.check_task(&who, Action::Manage, id).await?;
                }
            }
            DeadSelector::Filter { lambda, .. } => {
                who.check(Action::Manage, lambda).map_err(to_status)?;
            }
        }
        let redriven = self
            .0
            .dead_redrive(selector, version)
            .await
            .map_err(to_status)?;
        Ok(Response::new(proto::RedriveDeadResponse { redriven }))
    }

    async fn list_attempts(
        &self,
        request: Request<proto::ListAttemptsRequest>,
    ) -> Result<Response<proto::ListAttemptsResponse>, Status> {
        let who = principal(&request);
        let id = request.into_inner().id;
        self.check_task(&who, Action::Read, &id).await?;
        let attempts = self.0.task_attempts(&id).await.map_err(to_status)?;
        Ok(Response::new(proto::ListAttemptsResponse {
            attempts: attempts.into_iter().map(attempt_to_proto).collect(),
        }))
    }

    async fn create_cron(
        &self,
        request: Request<proto::CreateCronRequest>,
    ) -> Result<Response<proto::CreateCronResponse>, Status> {
        let who = principal(&request);
        let request = cron_request_from_proto(request.into_inner()).map_err(to_status)?;
        who.check(Action::Manage, &request.lambda)
            .map_err(to_status)?;
        let schedule = self.0.cron_create(request).await.map_err(to_status)?;
        Ok(Response::new(proto::CreateCronResponse {
            cron: Some(cron_to_proto(schedule)),
        }))
    }

    async fn preview_cron(
        &self,
        request: Request<proto::PreviewCronRequest>,
    ) -> Result<Response<proto::PreviewCronResponse>, Status> {
        // Reads nothing stored: any authenticated caller may ask.
        let request = request.into_inner();
        let occurrences = self
            .0
            .cron_preview(
                &request.expression,
                request.timezone.as_deref(),
                request.count,
            )
            .await
            .map_err(to_status)?;
        Ok(Response::new(proto::PreviewCronResponse {
            occurrences_ms: occurrences,
        }))
    }

    async fn list_crons(
        &self,
        request: Request<proto::ListCronsRequest>,
    ) -> Result<Response<proto::ListCronsResponse>, Status> {
        let who = principal(&request);
        let schedules = self.0.cron_list().await.map_err(to_status)?;
        Ok(Response::new(proto::ListCronsResponse {
            crons: schedules
                .into_iter()
                .filter(|schedule| who.may(Action::Read, &schedule.lambda))
                .map(cron_to_proto)
                .collect(),
        }))
    }

    async fn delete_cron(
        &self,
        request: Request<proto::DeleteCronRequest>,
    ) -> Result<Response<proto::DeleteCronResponse>, Status> {
        let who = principal(&request);
        let id = request.into_inner().id;
        if !who.is_admin() {
            let schedules = self.0.cron_list().await.map_err(to_status)?;
            if let Some(schedule) = schedules.iter().find(|s| s.id == id) {
                who.check(Action::Manage, &schedule.lambda)
                    .map_err(to_status)?;
            }
        }
        self.0.cron_delete(&id).await.map_err(to_status)?;
        Ok(Response::new(proto::DeleteCronResponse {}))
    }

    async fn create_token(
        &self,
        request: Request<proto::CreateTokenRequest>,
    ) -> Result<Response<proto::CreateTokenResponse>, Status> {
        principal(&request)
            .check_admin("create tokens")
            .map_err(to_status)?;
        let request = request.into_inner();
        let role = token_role_from_proto(request.role).map_err(to_status)?;
        let (token, secret) = self
            .0
            .token_create(&request.name, role, request.lambdas)
            .await
            .map_err(to_status)?;
        Ok(Response::new(proto::CreateTokenResponse {
            token: Some(token_to_proto(token)),
            secret,
        }))
    }

    async fn list_tokens(
        &self,
        request: Request<proto::ListTokensRequest>,
    ) -> Result<Response<proto::ListTokensResponse>, Status> {
        principal(&request)
            .check_admin("list tokens")
            .map_err(to_status)?;
        let tokens = self.0.token_list().await.map_err(to_status)?;
        Ok(Response::new(proto::ListTokensResponse {
            tokens: tokens.into_iter().map(token_to_proto).collect(),
        }))
    }

    async fn revoke_token(
        &self,
        request: Request<proto::RevokeTokenRequest>,
    ) -> Result<Response<proto::RevokeTokenResponse>, Status> {
        principal(&request)
            .check_admin("revoke tokens")
            .map_err(to_status)?;
        self.0
            .token_revoke(&request.into_inner().id)
            .await
            .map_err(to_status)?;
        Ok(Response::new(proto::RevokeTokenResponse {}))
    }

    async fn set_secret(
        &self,
        request: Request<proto::SetSecretRequest>,
    ) -> Result<Response<proto::SetSecretResponse>, Status> {
        let who = principal(&request);
        let request = request.into_inner();
        who.check(Action::Manage, &request.lambda)
            .map_err(to_status)?;
        self.0
            .secret_set(&request.lambda, &request.name, &request.value)
            .await
            .map_err(to_status)?;
        Ok(Response::new(proto::SetSecretResponse {}))
    }

    async fn list_secrets(
        &self,
        request: Request<proto::ListSecretsRequest>,
    ) -> Result<Response<proto::ListSecretsResponse>, Status> {
        let who = principal(&request);
        let request = request.into_inner();
        who.check(Action::Read, &request.lambda)
            .map_err(to_status)?;
        let secrets = self
            .0
            .secret_list(&request.lambda)
            .await
            .map_err(to_status)?;
        Ok(Response::new(proto::ListSecretsResponse {
            secrets: secrets
                .into_iter()
                .map(|secret| proto::Secret {
                    name: secret.name,
                    updated_at_ms: secret.updated_at,
                })
                .collect(),
        }))
    }

    async fn remove_secret(
        &self,
        request: Request<proto::RemoveSecretRequest>,
    ) -> Result<Response<proto::RemoveSecretResponse>, Status> {
        let who = principal(&request);
        let request = request.into_inner();
        who.check(Action::Manage, &request.lambda)
            .map_err(to_status)?;
        self.0
            .secret_remove(&request.lambda, &request.name)
            .await
            .map_err(to_status)?;
        Ok(Response::new(proto::RemoveSecretResponse {}))
    }

    async fn sealed_secrets(
        &self,
        request: Request<proto::SealedSecretsRequest>,
    ) -> Result<Response<proto::SealedSecretsResponse>, Status> {
        principal(&request)
            .check_admin("fetch sealed secrets")
            .map_err(to_status)?;
        let sealed = self
            .0
            .secret_sealed(&request.into_inner().lambda)
            .await
            .map_err(to_status)?;
        Ok(Response::new(proto::SealedSecretsResponse {
            version: sealed.version,
            secrets: sealed
                .secrets
                .into_iter()
                .map(|(name, sealed)| proto::SealedSecret { name, sealed })
                .collect(),
        }))
    }
}

/// Decodes a redrive request: ids, or a lambda (and collection).
fn dead_selector(request: proto::RedriveDeadRequest) -> Result<DeadSelector, Status> {
    match (request.ids.is_empty(), request.lambda) {
        (false, None) if request.collection.is_none() => Ok(DeadSelector::Ids(request.ids)),
        (true, Some(lambda)) => Ok(DeadSelector::Filter {
            lambda,
            collection: request.collection,
        }),
        _ => Err(Status::invalid_argument(
            "name either dead task ids, or a lambda (and optionally a collection), not both",
        )),
    }
}
