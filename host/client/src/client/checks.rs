//! A deploy's check and a move of waiting tasks, over gRPC: each streams
//! how far it is, then its report ([`ClientApi::lambda_check`],
//! [`ClientApi::lambda_move`]).
//!
//! [`ClientApi::lambda_check`]: waft_core::roles::ClientApi::lambda_check
//! [`ClientApi::lambda_move`]: waft_core::roles::ClientApi::lambda_move

use waft_core::model::{CheckProgress, DeployCheck, MoveReport};
use waft_core::{LambdaConfig, ServiceError, ServiceResult};

use super::frontend::{DEPLOY_SILENCE, FrontendClient};
use crate::convert::*;
use crate::proto;

pub(super) async fn check(
    frontend: &FrontendClient,
    name: &str,
    component: Vec<u8>,
    config: LambdaConfig,
    progress: &(dyn Fn(CheckProgress) + Send + Sync),
) -> ServiceResult<DeployCheck> {
    let request = proto::CheckDeployRequest {
        name: name.to_owned(),
        component,
        config: Some(config_to_proto(&config)),
    };
    let reports = frontend
        .0
        .clone()
        .check_deploy(request)
        .await
        .map_err(FrontendClient::error)?
        .into_inner();
    let what = format!("the check of {name}");
    until_report(reports, &what, progress, |m| match m.report {
        Some(report) => Ok(deploy_check_from_proto(report)),
        None => Err(CheckProgress {
            checked: m.checked,
            of: m.of,
        }),
    })
    .await
}

pub(super) async fn move_waiting(
    frontend: &FrontendClient,
    name: &str,
    to: Option<u32>,
    progress: &(dyn Fn(CheckProgress) + Send + Sync),
) -> ServiceResult<MoveReport> {
    let request = proto::MoveWaitingRequest {
        name: name.to_owned(),
        to,
    };
    let reports = frontend
        .0
        .clone()
        .move_waiting(request)
        .await
        .map_err(FrontendClient::error)?
        .into_inner();
    let what = format!("the move of {name}'s waiting tasks");
    until_report(reports, &what, progress, |m| match m.report {
        Some(report) => Ok(move_report_from_proto(report)),
        None => Err(CheckProgress {
            checked: m.checked,
            of: m.of,
        }),
    })
    .await
}

/// Reads `reports` until the message that carries the answer (`split`
/// gives it, or the progress a message tells), telling `progress` of the
/// others. A Frontend silent for [`DEPLOY_SILENCE`] is given up on.
async fn until_report<M, T>(
    mut reports: tonic::Streaming<M>,
    what: &str,
    progress: &(dyn Fn(CheckProgress) + Send + Sync),
    split: impl Fn(M) -> Result<T, CheckProgress>,
) -> ServiceResult<T> {
    let role = FrontendClient::ROLE;
    loop {
        let next = tokio::time::timeout(DEPLOY_SILENCE, reports.message())
            .await
            .map_err(|_| {
                ServiceError::Unavailable(format!(
                    "the {role} sent nothing for {DEPLOY_SILENCE:?} during {what}"
                ))
            })?
            .map_err(FrontendClient::error)?;
        let Some(message) = next else {
            return Err(ServiceError::Internal(format!(
                "the {role} ended {what} without a report"
            )));
        };
        match split(message) {
            Ok(answer) => return Ok(answer),
            Err(now) => progress(now),
        }
    }
}
