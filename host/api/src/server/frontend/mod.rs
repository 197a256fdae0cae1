//! The Frontend's adapter: every call decoded, handed to the Frontend
//! acting for its caller (the principal the authentication layer found,
//! `crate::auth`), and its answer encoded. The Frontend checks the caller's
//! rights itself (`waft_core::access`), as it does for callers in its own
//! process: nothing here decides who may do what.
//!
//! The service's trait, here, is the table of contents: it finds who is
//! calling and hands each call to the module of its family, which decodes
//! it, calls the Frontend and encodes the answer. The families:
//! `tasks.rs` (scheduling and reading tasks), `lambdas.rs` (deploys and
//! versions), `operations.rs` (gates, dead letters, cron schedules),
//! `admin.rs` (tokens and secrets) and `cluster.rs` (what the
//! installation's own processes fetch and wait for).

mod admin;
mod checks;
mod cluster;
mod lambdas;
mod operations;
mod tasks;

use std::sync::Arc;

use tonic::{Request, Response, Status};
use waft_client::proto;
use waft_services::Frontend;

use crate::auth::principal;

/// The Frontend over gRPC.
pub struct FrontendService(pub Arc<Frontend>);

impl FrontendService {
    /// The Frontend acting for the caller of `request`.
    fn role<T>(&self, request: &Request<T>) -> Frontend {
        self.0.acting(principal(request))
    }
}

/// A streamed answer.
pub type Progress<T> =
    std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl proto::frontend_server::Frontend for FrontendService {
    type DeployLambdaStream = Progress<proto::DeployLambdaResponse>;
    type CheckDeployStream = Progress<proto::CheckDeployResponse>;
    type MoveWaitingStream = Progress<proto::MoveWaitingResponse>;
    type GetArtifactStream = Progress<proto::GetArtifactResponse>;

    // Tasks.

    async fn schedule(
        &self,
        request: Request<proto::ScheduleRequest>,
    ) -> Result<Response<proto::ScheduleResponse>, Status> {
        tasks::schedule(self.role(&request), request).await
    }

    async fn schedule_batch(
        &self,
        request: Request<proto::ScheduleBatchRequest>,
    ) -> Result<Response<proto::ScheduleBatchResponse>, Status> {
        tasks::schedule_batch(self.role(&request), request).await
    }

    async fn get_task(
        &self,
        request: Request<proto::GetTaskRequest>,
    ) -> Result<Response<proto::GetTaskResponse>, Status> {
        tasks::get_task(self.role(&request), request).await
    }

    async fn list_tasks(
        &self,
        request: Request<proto::ListTasksRequest>,
    ) -> Result<Response<proto::ListTasksResponse>, Status> {
        tasks::list_tasks(self.role(&request), request).await
    }

    async fn lambda_stats(
        &self,
        request: Request<proto::LambdaStatsRequest>,
    ) -> Result<Response<proto::LambdaStatsResponse>, Status> {
        tasks::lambda_stats(self.role(&request), request).await
    }

    async fn task_history(
        &self,
        request: Request<proto::TaskHistoryRequest>,
    ) -> Result<Response<proto::TaskHistoryResponse>, Status> {
        tasks::task_history(self.role(&request), request).await
    }

    async fn count_tasks(
        &self,
        request: Request<proto::CountTasksRequest>,
    ) -> Result<Response<proto::CountTasksResponse>, Status> {
        tasks::count_tasks(self.role(&request), request).await
    }

    async fn cancel_task(
        &self,
        request: Request<proto::CancelTaskRequest>,
    ) -> Result<Response<proto::CancelTaskResponse>, Status> {
        tasks::cancel_task(self.role(&request), request).await
    }

    async fn signal_task(
        &self,
        request: Request<proto::SignalTaskRequest>,
    ) -> Result<Response<proto::SignalTaskResponse>, Status> {
        tasks::signal_task(self.role(&request), request).await
    }

    async fn list_attempts(
        &self,
        request: Request<proto::ListAttemptsRequest>,
    ) -> Result<Response<proto::ListAttemptsResponse>, Status> {
        tasks::list_attempts(self.role(&request), request).await
    }

    async fn get_journal(
        &self,
        request: Request<proto::GetJournalRequest>,
    ) -> Result<Response<proto::GetJournalResponse>, Status> {
        tasks::get_journal(self.role(&request), request).await
    }

    // Lambdas.

    async fn deploy_lambda(
        &self,
        request: Request<proto::DeployLambdaRequest>,
    ) -> Result<Response<Self::DeployLambdaStream>, Status> {
        lambdas::deploy_lambda(self.role(&request), request).await
    }

    async fn check_deploy(
        &self,
        request: Request<proto::CheckDeployRequest>,
    ) -> Result<Response<Self::CheckDeployStream>, Status> {
        checks::check_deploy(self.role(&request), request).await
    }

    async fn move_waiting(
        &self,
        request: Request<proto::MoveWaitingRequest>,
    ) -> Result<Response<Self::MoveWaitingStream>, Status> {
        checks::move_waiting(self.role(&request), request).await
    }

    async fn get_lambda(
        &self,
        request: Request<proto::GetLambdaRequest>,
    ) -> Result<Response<proto::GetLambdaResponse>, Status> {
        lambdas::get_lambda(self.role(&request), request).await
    }

    async fn list_lambdas(
        &self,
        request: Request<proto::ListLambdasRequest>,
    ) -> Result<Response<proto::ListLambdasResponse>, Status> {
        lambdas::list_lambdas(self.role(&request)).await
    }

    async fn rollback_lambda(
        &self,
        request: Request<proto::RollbackLambdaRequest>,
    ) -> Result<Response<proto::RollbackLambdaResponse>, Status> {
        lambdas::rollback_lambda(self.role(&request), request).await
    }

    async fn delete_lambda(
        &self,
        request: Request<proto::DeleteLambdaRequest>,
    ) -> Result<Response<proto::DeleteLambdaResponse>, Status> {
        lambdas::delete_lambda(self.role(&request), request).await
    }

    async fn list_versions(
        &self,
        request: Request<proto::ListVersionsRequest>,
    ) -> Result<Response<proto::ListVersionsResponse>, Status> {
        lambdas::list_versions(self.role(&request), request).await
    }

    // Gates, dead letters and cron schedules.

    async fn set_gate(
        &self,
        request: Request<proto::SetGateRequest>,
    ) -> Result<Response<proto::SetGateResponse>, Status> {
        operations::set_gate(self.role(&request), request).await
    }

    async fn list_gates(
        &self,
        request: Request<proto::ListGatesRequest>,
    ) -> Result<Response<proto::ListGatesResponse>, Status> {
        operations::list_gates(self.role(&request)).await
    }

    async fn redrive_dead(
        &self,
        request: Request<proto::RedriveDeadRequest>,
    ) -> Result<Response<proto::RedriveDeadResponse>, Status> {
        operations::redrive_dead(self.role(&request), request).await
    }

    async fn purge_dead(
        &self,
        request: Request<proto::PurgeDeadRequest>,
    ) -> Result<Response<proto::PurgeDeadResponse>, Status> {
        operations::purge_dead(self.role(&request), request).await
    }

    async fn create_cron(
        &self,
        request: Request<proto::CreateCronRequest>,
    ) -> Result<Response<proto::CreateCronResponse>, Status> {
        operations::create_cron(self.role(&request), request).await
    }

    async fn preview_cron(
        &self,
        request: Request<proto::PreviewCronRequest>,
    ) -> Result<Response<proto::PreviewCronResponse>, Status> {
        operations::preview_cron(self.role(&request), request).await
    }

    async fn list_crons(
        &self,
        request: Request<proto::ListCronsRequest>,
    ) -> Result<Response<proto::ListCronsResponse>, Status> {
        operations::list_crons(self.role(&request)).await
    }

    async fn delete_cron(
        &self,
        request: Request<proto::DeleteCronRequest>,
    ) -> Result<Response<proto::DeleteCronResponse>, Status> {
        operations::delete_cron(self.role(&request), request).await
    }

    // Tokens and secrets.

    async fn create_token(
        &self,
        request: Request<proto::CreateTokenRequest>,
    ) -> Result<Response<proto::CreateTokenResponse>, Status> {
        admin::create_token(self.role(&request), request).await
    }

    async fn list_tokens(
        &self,
        request: Request<proto::ListTokensRequest>,
    ) -> Result<Response<proto::ListTokensResponse>, Status> {
        admin::list_tokens(self.role(&request)).await
    }

    async fn revoke_token(
        &self,
        request: Request<proto::RevokeTokenRequest>,
    ) -> Result<Response<proto::RevokeTokenResponse>, Status> {
        admin::revoke_token(self.role(&request), request).await
    }

    async fn set_secret(
        &self,
        request: Request<proto::SetSecretRequest>,
    ) -> Result<Response<proto::SetSecretResponse>, Status> {
        admin::set_secret(self.role(&request), request).await
    }

    async fn list_secrets(
        &self,
        request: Request<proto::ListSecretsRequest>,
    ) -> Result<Response<proto::ListSecretsResponse>, Status> {
        admin::list_secrets(self.role(&request), request).await
    }

    async fn remove_secret(
        &self,
        request: Request<proto::RemoveSecretRequest>,
    ) -> Result<Response<proto::RemoveSecretResponse>, Status> {
        admin::remove_secret(self.role(&request), request).await
    }

    // The installation's own calls.

    async fn get_component(
        &self,
        request: Request<proto::GetComponentRequest>,
    ) -> Result<Response<proto::GetComponentResponse>, Status> {
        cluster::get_component(self.role(&request), request).await
    }

    async fn get_artifact(
        &self,
        request: Request<proto::GetArtifactRequest>,
    ) -> Result<Response<Self::GetArtifactStream>, Status> {
        cluster::get_artifact(self.role(&request), request).await
    }

    async fn wait_lambda_change(
        &self,
        request: Request<proto::WaitLambdaChangeRequest>,
    ) -> Result<Response<proto::WaitLambdaChangeResponse>, Status> {
        cluster::wait_lambda_change(self.role(&request), request).await
    }

    async fn wait_queue_fill(
        &self,
        request: Request<proto::WaitQueueFillRequest>,
    ) -> Result<Response<proto::WaitQueueFillResponse>, Status> {
        cluster::wait_queue_fill(self.role(&request), request).await
    }

    async fn list_queue_backlog(
        &self,
        request: Request<proto::ListQueueBacklogRequest>,
    ) -> Result<Response<proto::ListQueueBacklogResponse>, Status> {
        cluster::list_queue_backlog(self.role(&request)).await
    }

    async fn sealed_secrets(
        &self,
        request: Request<proto::SealedSecretsRequest>,
    ) -> Result<Response<proto::SealedSecretsResponse>, Status> {
        cluster::sealed_secrets(self.role(&request), request).await
    }
}
