//! The Frontend's adapter: every call decoded, handed to the Frontend
//! acting for its caller (the principal the authentication layer found,
//! `crate::auth`), and its answer encoded. The Frontend checks the caller's
//! rights itself (`waft_core::access`), as it does for callers in its own
//! process: nothing here decides who may do what.

use std::sync::Arc;
use std::time::Duration;

use tonic::{Request, Response, Status};
use waft_client::convert::*;
use waft_client::proto;
use waft_client::status::to_status;
use waft_services::Frontend;
use waft_services::api::{AdminApi, ClientApi, ClusterApi, JournalQuery};
use waft_store::{DeadSelector, TaskCount, TaskList};

use crate::auth::principal;

/// The Frontend over gRPC.
pub struct FrontendService(pub Arc<Frontend>);

impl FrontendService {
    /// The Frontend acting for the caller of `request`.
    fn role<T>(&self, request: &Request<T>) -> Frontend {
        self.0.acting(principal(request))
    }
}

/// The trace context of a call's `traceparent` (and `tracestate`)
/// metadata, for the tasks it schedules that name none of their own. A
/// malformed one is ignored, as W3C asks of a receiver: a proxy's header
/// must not cost a client its task.
fn header_trace<T>(request: &Request<T>) -> Option<waft_core::TraceContext> {
    let metadata = request.metadata();
    let traceparent = metadata.get("traceparent")?.to_str().ok()?;
    let tracestate = metadata.get("tracestate").and_then(|v| v.to_str().ok());
    match waft_core::TraceContext::parse(traceparent, tracestate) {
        Ok(trace) => Some(trace),
        Err(error) => {
            tracing::debug!(%error, "ignoring the call's traceparent");
            None
        }
    }
}

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
        let role = self.role(&request);
        let header = header_trace(&request);
        let task = required(request.into_inner().task, "task").map_err(to_status)?;
        let mut task = new_task_from_proto(task).map_err(to_status)?;
        task.trace = task.trace.or(header);
        let mut inserted = role
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
        let role = self.role(&request);
        let header = header_trace(&request);
        let tasks = request
            .into_inner()
            .tasks
            .into_iter()
            .map(|task| {
                let mut task = new_task_from_proto(task)?;
                task.trace = task.trace.or_else(|| header.clone());
                Ok(task)
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(to_status)?;
        let inserted = role.task_schedule_many(tasks).await.map_err(to_status)?;
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
        let role = self.role(&request);
        let task = role
            .task_get(&request.into_inner().id)
            .await
            .map_err(to_status)?;
        Ok(Response::new(proto::GetTaskResponse {
            task: Some(task_to_proto(task)),
        }))
    }

    async fn list_tasks(
        &self,
        request: Request<proto::ListTasksRequest>,
    ) -> Result<Response<proto::ListTasksResponse>, Status> {
        let role = self.role(&request);
        let request = request.into_inner();
        let filter = TaskList {
            status: request
                .status
                .map(status_from_proto)
                .transpose()
                .map_err(to_status)?,
            lambda: request.lambda,
            // Every lambda; the Frontend keeps it to the caller's.
            lambdas: None,
            collection: request.collection,
            key: request.key,
            parent_id: request.parent_id,
            created_from: request.created_from_ms,
            created_before: request.created_before_ms,
            newest_first: request.newest_first,
            after: request.after,
            limit: request.limit,
        };
        let tasks = role.task_list(filter).await.map_err(to_status)?;
        Ok(Response::new(proto::ListTasksResponse {
            tasks: tasks.into_iter().map(task_to_proto).collect(),
        }))
    }

    async fn lambda_stats(
        &self,
        request: Request<proto::LambdaStatsRequest>,
    ) -> Result<Response<proto::LambdaStatsResponse>, Status> {
        let role = self.role(&request);
        let window = match request.into_inner().window_ms {
            0 => Duration::from_secs(3600),
            ms => Duration::from_millis(ms),
        };
        let overview = role.lambda_stats(window).await.map_err(to_status)?;
        Ok(Response::new(overview_to_proto(overview)))
    }

    async fn task_history(
        &self,
        request: Request<proto::TaskHistoryRequest>,
    ) -> Result<Response<proto::TaskHistoryResponse>, Status> {
        let role = self.role(&request);
        let query = history_query_from_proto(request.into_inner());
        let answer = role.task_history(query).await.map_err(to_status)?;
        Ok(Response::new(history_to_proto(answer)))
    }

    async fn count_tasks(
        &self,
        request: Request<proto::CountTasksRequest>,
    ) -> Result<Response<proto::CountTasksResponse>, Status> {
        let role = self.role(&request);
        let request = request.into_inner();
        let counts = role
            .task_count(TaskCount {
                lambda: request.lambda,
                collection: request.collection,
                key: request.key,
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
        let role = self.role(&request);
        let id = request.into_inner().id;
        let task = role.task_cancel(&id).await.map_err(to_status)?;
        Ok(Response::new(proto::CancelTaskResponse {
            task: Some(task_to_proto(task)),
        }))
    }

    async fn signal_task(
        &self,
        request: Request<proto::SignalTaskRequest>,
    ) -> Result<Response<proto::SignalTaskResponse>, Status> {
        let role = self.role(&request);
        let proto::SignalTaskRequest { id, name, payload } = request.into_inner();
        let sent = role
            .task_signal(&id, &name, payload)
            .await
            .map_err(to_status)?;
        Ok(Response::new(proto::SignalTaskResponse {
            seq: sent.seq,
            woke: sent.woke,
        }))
    }

    type DeployLambdaStream = Progress<proto::DeployLambdaResponse>;
    type GetArtifactStream = Progress<proto::GetArtifactResponse>;

    async fn deploy_lambda(
        &self,
        request: Request<proto::DeployLambdaRequest>,
    ) -> Result<Response<Self::DeployLambdaStream>, Status> {
        let role = self.role(&request);
        let request = request.into_inner();
        let config = config_from_proto(request.config).map_err(to_status)?;
        // Checked before the deploy starts, so that a refusal is the
        // call's answer rather than its first report.
        role.allow_deploy(&request.name, &config)
            .map_err(to_status)?;
        // The deploy runs on a task of its own, to its end even if the
        // client leaves (it is one transaction: stored whole or not at
        // all); the answer reports on it every second meanwhile.
        let frontend = role;
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
        let role = self.role(&request);
        let request = request.into_inner();
        let lambda = role
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
        let role = self.role(&request);
        let lambdas = role.lambda_list().await.map_err(to_status)?;
        Ok(Response::new(proto::ListLambdasResponse {
            lambdas: lambdas.into_iter().map(lambda_to_proto).collect(),
        }))
    }

    async fn rollback_lambda(
        &self,
        request: Request<proto::RollbackLambdaRequest>,
    ) -> Result<Response<proto::RollbackLambdaResponse>, Status> {
        let role = self.role(&request);
        let request = request.into_inner();
        let lambda = role
            .lambda_rollback(&request.name, request.version)
            .await
            .map_err(to_status)?;
        Ok(Response::new(proto::RollbackLambdaResponse {
            lambda: Some(lambda_to_proto(lambda)),
        }))
    }

    async fn delete_lambda(
        &self,
        request: Request<proto::DeleteLambdaRequest>,
    ) -> Result<Response<proto::DeleteLambdaResponse>, Status> {
        let role = self.role(&request);
        let request = request.into_inner();
        let deleted = role
            .lambda_delete(&request.name, request.drop_tasks)
            .await
            .map_err(to_status)?;
        Ok(Response::new(proto::DeleteLambdaResponse {
            tasks: deleted.tasks,
            live: deleted.live,
        }))
    }

    async fn list_versions(
        &self,
        request: Request<proto::ListVersionsRequest>,
    ) -> Result<Response<proto::ListVersionsResponse>, Status> {
        let role = self.role(&request);
        let name = request.into_inner().name;
        let versions = role.lambda_versions(&name).await.map_err(to_status)?;
        let uses = versions
            .iter()
            .map(|v| proto::VersionUse {
                suspended: v.suspended,
                live: v.live,
            })
            .collect();
        Ok(Response::new(proto::ListVersionsResponse {
            versions: versions
                .into_iter()
                .map(|v| lambda_to_proto(v.lambda))
                .collect(),
            uses,
        }))
    }

    async fn get_component(
        &self,
        request: Request<proto::GetComponentRequest>,
    ) -> Result<Response<proto::GetComponentResponse>, Status> {
        let role = self.role(&request);
        let component = role
            .component_get(&request.into_inner().digest)
            .await
            .map_err(to_status)?;
        Ok(Response::new(proto::GetComponentResponse { component }))
    }

    async fn get_artifact(
        &self,
        request: Request<proto::GetArtifactRequest>,
    ) -> Result<Response<Self::GetArtifactStream>, Status> {
        let role = self.role(&request);
        let request = request.into_inner();
        let artifact = role
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
        let role = self.role(&request);
        let request = request.into_inner();
        let generation = role
            .lambda_changed(request.seen, Duration::from_millis(request.wait_ms))
            .await
            .map_err(to_status)?;
        Ok(Response::new(proto::WaitLambdaChangeResponse {
            generation,
        }))
    }

    async fn wait_queue_fill(
        &self,
        request: Request<proto::WaitQueueFillRequest>,
    ) -> Result<Response<proto::WaitQueueFillResponse>, Status> {
        let role = self.role(&request);
        let request = request.into_inner();
        let fills = role
            .queue_filled(request.seen, Duration::from_millis(request.wait_ms))
            .await
            .map_err(to_status)?;
        Ok(Response::new(queue_fills_to_proto(fills)))
    }

    async fn list_queue_backlog(
        &self,
        request: Request<proto::ListQueueBacklogRequest>,
    ) -> Result<Response<proto::ListQueueBacklogResponse>, Status> {
        let backlog = self
            .role(&request)
            .queue_backlog()
            .await
            .map_err(to_status)?;
        Ok(Response::new(proto::ListQueueBacklogResponse {
            backlog: backlog.into_iter().map(backlog_to_proto).collect(),
        }))
    }

    async fn set_gate(
        &self,
        request: Request<proto::SetGateRequest>,
    ) -> Result<Response<proto::SetGateResponse>, Status> {
        let role = self.role(&request);
        let request = request.into_inner();
        let state = gate_state_from_proto(request.state).map_err(to_status)?;
        let released = role
            .gate_set(&request.lambda, request.collection.as_deref(), state)
            .await
            .map_err(to_status)?;
        Ok(Response::new(proto::SetGateResponse { released }))
    }

    async fn list_gates(
        &self,
        request: Request<proto::ListGatesRequest>,
    ) -> Result<Response<proto::ListGatesResponse>, Status> {
        let role = self.role(&request);
        let gates = role.gate_list().await.map_err(to_status)?;
        Ok(Response::new(proto::ListGatesResponse {
            gates: gates.into_iter().map(gate_to_proto).collect(),
        }))
    }

    async fn redrive_dead(
        &self,
        request: Request<proto::RedriveDeadRequest>,
    ) -> Result<Response<proto::RedriveDeadResponse>, Status> {
        let role = self.role(&request);
        let request = request.into_inner();
        let (version, fresh) = (request.version, request.fresh);
        let selector = dead_selector(request.ids, request.lambda, request.collection)?;
        let redriven = role
            .dead_redrive(selector, version, fresh)
            .await
            .map_err(to_status)?;
        Ok(Response::new(proto::RedriveDeadResponse { redriven }))
    }

    async fn purge_dead(
        &self,
        request: Request<proto::PurgeDeadRequest>,
    ) -> Result<Response<proto::PurgeDeadResponse>, Status> {
        let role = self.role(&request);
        let request = request.into_inner();
        let selector = dead_selector(request.ids, request.lambda, request.collection)?;
        let purged = role.dead_purge(selector).await.map_err(to_status)?;
        Ok(Response::new(proto::PurgeDeadResponse { purged }))
    }

    async fn list_attempts(
        &self,
        request: Request<proto::ListAttemptsRequest>,
    ) -> Result<Response<proto::ListAttemptsResponse>, Status> {
        let role = self.role(&request);
        let id = request.into_inner().id;
        let attempts = role.task_attempts(&id).await.map_err(to_status)?;
        Ok(Response::new(proto::ListAttemptsResponse {
            attempts: attempts.into_iter().map(attempt_to_proto).collect(),
        }))
    }

    async fn get_journal(
        &self,
        request: Request<proto::GetJournalRequest>,
    ) -> Result<Response<proto::GetJournalResponse>, Status> {
        let role = self.role(&request);
        let request = request.into_inner();
        let query = JournalQuery {
            id: request.id,
            answers: request.answers,
            from: request.from,
            limit: request.limit,
        };
        let slice = role.task_journal_page(query).await.map_err(to_status)?;
        Ok(Response::new(proto::GetJournalResponse {
            entries: slice
                .entries
                .into_iter()
                .map(journal_entry_to_proto)
                .collect(),
            next: slice.next,
        }))
    }

    async fn create_cron(
        &self,
        request: Request<proto::CreateCronRequest>,
    ) -> Result<Response<proto::CreateCronResponse>, Status> {
        let role = self.role(&request);
        let request = cron_request_from_proto(request.into_inner()).map_err(to_status)?;
        let schedule = role.cron_create(request).await.map_err(to_status)?;
        Ok(Response::new(proto::CreateCronResponse {
            cron: Some(cron_to_proto(schedule)),
        }))
    }

    async fn preview_cron(
        &self,
        request: Request<proto::PreviewCronRequest>,
    ) -> Result<Response<proto::PreviewCronResponse>, Status> {
        let role = self.role(&request);
        let request = request.into_inner();
        let occurrences = role
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
        let role = self.role(&request);
        let schedules = role.cron_list().await.map_err(to_status)?;
        Ok(Response::new(proto::ListCronsResponse {
            crons: schedules.into_iter().map(cron_to_proto).collect(),
        }))
    }

    async fn delete_cron(
        &self,
        request: Request<proto::DeleteCronRequest>,
    ) -> Result<Response<proto::DeleteCronResponse>, Status> {
        let role = self.role(&request);
        let id = request.into_inner().id;
        role.cron_delete(&id).await.map_err(to_status)?;
        Ok(Response::new(proto::DeleteCronResponse {}))
    }

    async fn create_token(
        &self,
        request: Request<proto::CreateTokenRequest>,
    ) -> Result<Response<proto::CreateTokenResponse>, Status> {
        let role = self.role(&request);
        let request = request.into_inner();
        let kind = token_role_from_proto(request.role).map_err(to_status)?;
        let (token, secret) = role
            .token_create(&request.name, kind, request.lambdas)
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
        let role = self.role(&request);
        let tokens = role.token_list().await.map_err(to_status)?;
        Ok(Response::new(proto::ListTokensResponse {
            tokens: tokens.into_iter().map(token_to_proto).collect(),
        }))
    }

    async fn revoke_token(
        &self,
        request: Request<proto::RevokeTokenRequest>,
    ) -> Result<Response<proto::RevokeTokenResponse>, Status> {
        let role = self.role(&request);
        role.token_revoke(&request.into_inner().id)
            .await
            .map_err(to_status)?;
        Ok(Response::new(proto::RevokeTokenResponse {}))
    }

    async fn set_secret(
        &self,
        request: Request<proto::SetSecretRequest>,
    ) -> Result<Response<proto::SetSecretResponse>, Status> {
        let role = self.role(&request);
        let request = request.into_inner();
        role.secret_set(&request.lambda, &request.name, &request.value)
            .await
            .map_err(to_status)?;
        Ok(Response::new(proto::SetSecretResponse {}))
    }

    async fn list_secrets(
        &self,
        request: Request<proto::ListSecretsRequest>,
    ) -> Result<Response<proto::ListSecretsResponse>, Status> {
        let role = self.role(&request);
        let request = request.into_inner();
        let secrets = role.secret_list(&request.lambda).await.map_err(to_status)?;
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
        let role = self.role(&request);
        let request = request.into_inner();
        role.secret_remove(&request.lambda, &request.name)
            .await
            .map_err(to_status)?;
        Ok(Response::new(proto::RemoveSecretResponse {}))
    }

    async fn sealed_secrets(
        &self,
        request: Request<proto::SealedSecretsRequest>,
    ) -> Result<Response<proto::SealedSecretsResponse>, Status> {
        let role = self.role(&request);
        let sealed = role
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

/// Decodes the dead letters a redrive or purge names: ids, or a lambda
/// (and collection).
fn dead_selector(
    ids: Vec<String>,
    lambda: Option<String>,
    collection: Option<String>,
) -> Result<DeadSelector, Status> {
    match (ids.is_empty(), lambda) {
        (false, None) if collection.is_none() => Ok(DeadSelector::Ids(ids)),
        (true, Some(lambda)) => Ok(DeadSelector::Filter { lambda, collection }),
        _ => Err(Status::invalid_argument(
            "name either dead task ids, or a lambda (and optionally a collection), not both",
        )),
    }
}
