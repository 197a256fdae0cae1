//! Lambdas over gRPC: deploying one (with its progress streamed while it
//! compiles), reading one, its versions or all, rolling one back and
//! deleting it. A deploy is the one call here that runs on past its
//! client: it is one transaction, stored whole or not at all.

use std::time::Duration;

use tonic::{Request, Response, Status};
use waft_client::convert::*;
use waft_client::proto;
use waft_client::status::to_status;
use waft_services::Frontend;
use waft_services::api::ClientApi;

use super::Progress;

/// How often a deploy at work reports.
pub(super) const DEPLOY_REPORT_EVERY: Duration = Duration::from_secs(1);

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

pub(super) async fn deploy_lambda(
    role: Frontend,
    request: Request<proto::DeployLambdaRequest>,
) -> Result<Response<Progress<proto::DeployLambdaResponse>>, Status> {
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

pub(super) async fn get_lambda(
    role: Frontend,
    request: Request<proto::GetLambdaRequest>,
) -> Result<Response<proto::GetLambdaResponse>, Status> {
    let request = request.into_inner();
    let lambda = role
        .lambda_get(&request.name, request.version)
        .await
        .map_err(to_status)?;
    Ok(Response::new(proto::GetLambdaResponse {
        lambda: Some(lambda_to_proto(lambda)),
    }))
}

pub(super) async fn list_lambdas(
    role: Frontend,
) -> Result<Response<proto::ListLambdasResponse>, Status> {
    let lambdas = role.lambda_list().await.map_err(to_status)?;
    Ok(Response::new(proto::ListLambdasResponse {
        lambdas: lambdas.into_iter().map(lambda_to_proto).collect(),
    }))
}

pub(super) async fn rollback_lambda(
    role: Frontend,
    request: Request<proto::RollbackLambdaRequest>,
) -> Result<Response<proto::RollbackLambdaResponse>, Status> {
    let request = request.into_inner();
    let lambda = role
        .lambda_rollback(&request.name, request.version)
        .await
        .map_err(to_status)?;
    Ok(Response::new(proto::RollbackLambdaResponse {
        lambda: Some(lambda_to_proto(lambda)),
    }))
}

pub(super) async fn delete_lambda(
    role: Frontend,
    request: Request<proto::DeleteLambdaRequest>,
) -> Result<Response<proto::DeleteLambdaResponse>, Status> {
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

pub(super) async fn list_versions(
    role: Frontend,
    request: Request<proto::ListVersionsRequest>,
) -> Result<Response<proto::ListVersionsResponse>, Status> {
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
