//! A deploy's check and a move of waiting tasks over gRPC: both replay
//! every live task's journal, minutes for a large lambda, so both stream
//! how far they are every second and their report last. A check changes
//! nothing and stops when its client leaves; a move runs to its end, as a
//! deploy does (each batch it moves is one transaction).

use tokio::sync::watch;
use tonic::{Request, Response, Status};
use waft_client::convert::*;
use waft_client::proto;
use waft_client::status::to_status;
use waft_services::api::ClientApi;
use waft_services::{Frontend, ServiceResult};
use waft_store::CheckProgress;

use super::Progress;
use super::lambdas::DEPLOY_REPORT_EVERY;

pub(super) async fn check_deploy(
    role: Frontend,
    request: Request<proto::CheckDeployRequest>,
) -> Result<Response<Progress<proto::CheckDeployResponse>>, Status> {
    let request = request.into_inner();
    let config = config_from_proto(request.config).map_err(to_status)?;
    let (progress, heard) = watch::channel(CheckProgress::default());
    let check = tokio::spawn(async move {
        let report = |now: CheckProgress| {
            progress.send_replace(now);
        };
        role.lambda_check(&request.name, request.component, config, &report)
            .await
    });
    let answer = |now: CheckProgress| proto::CheckDeployResponse {
        checked: now.checked,
        of: now.of,
        report: None,
    };
    let last = |report: waft_store::DeployCheck| proto::CheckDeployResponse {
        checked: report.checked,
        of: report.checked,
        report: Some(deploy_check_to_proto(report)),
    };
    Ok(follow(check, heard, true, answer, last))
}

pub(super) async fn move_waiting(
    role: Frontend,
    request: Request<proto::MoveWaitingRequest>,
) -> Result<Response<Progress<proto::MoveWaitingResponse>>, Status> {
    let request = request.into_inner();
    let (progress, heard) = watch::channel(CheckProgress::default());
    let moving = tokio::spawn(async move {
        let report = |now: CheckProgress| {
            progress.send_replace(now);
        };
        role.lambda_move(&request.name, request.to, &report).await
    });
    let answer = |now: CheckProgress| proto::MoveWaitingResponse {
        checked: now.checked,
        of: now.of,
        report: None,
    };
    let last = |report: waft_store::MoveReport| proto::MoveWaitingResponse {
        checked: report.check.checked,
        of: report.check.checked,
        report: Some(move_report_to_proto(report)),
    };
    Ok(follow(moving, heard, false, answer, last))
}

/// Streams `work`'s progress every second, then its answer. `stops`: the
/// work is aborted when the client leaves (it changes nothing).
fn follow<T: Send + 'static, M: Send + 'static>(
    mut work: tokio::task::JoinHandle<ServiceResult<T>>,
    mut heard: watch::Receiver<CheckProgress>,
    stops: bool,
    answer: impl Fn(CheckProgress) -> M + Send + 'static,
    last: impl FnOnce(T) -> M + Send + 'static,
) -> Response<Progress<M>> {
    let (sender, receiver) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(DEPLOY_REPORT_EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let joined = loop {
            tokio::select! {
                joined = &mut work => break joined,
                _ = ticks.tick() => {
                    let now = *heard.borrow_and_update();
                    if sender.send(Ok(answer(now))).await.is_err() && stops {
                        work.abort();
                        return;
                    }
                }
            }
        };
        let message = match joined {
            Ok(Ok(report)) => Ok(last(report)),
            Ok(Err(error)) => Err(to_status(error)),
            Err(error) => Err(Status::internal(format!("it stopped: {error}"))),
        };
        let _ = sender.send(message).await;
    });
    Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(
        receiver,
    )))
}
