//! The operator's controls over how tasks flow, over gRPC: gates (pause
//! and release a lambda or collection), dead letters (redrive or purge
//! them) and cron schedules. Each acts on many tasks at once, where
//! `tasks.rs` acts on one.

use tonic::{Request, Response, Status};
use waft_client::convert::*;
use waft_client::proto;
use waft_client::status::to_status;
use waft_services::Frontend;
use waft_services::api::ClientApi;
use waft_store::DeadSelector;

pub(super) async fn set_gate(
    role: Frontend,
    request: Request<proto::SetGateRequest>,
) -> Result<Response<proto::SetGateResponse>, Status> {
    let request = request.into_inner();
    let state = gate_state_from_proto(request.state).map_err(to_status)?;
    let released = role
        .gate_set(&request.lambda, request.collection.as_deref(), state)
        .await
        .map_err(to_status)?;
    Ok(Response::new(proto::SetGateResponse { released }))
}

pub(super) async fn list_gates(
    role: Frontend,
) -> Result<Response<proto::ListGatesResponse>, Status> {
    let gates = role.gate_list().await.map_err(to_status)?;
    Ok(Response::new(proto::ListGatesResponse {
        gates: gates.into_iter().map(gate_to_proto).collect(),
    }))
}

pub(super) async fn redrive_dead(
    role: Frontend,
    request: Request<proto::RedriveDeadRequest>,
) -> Result<Response<proto::RedriveDeadResponse>, Status> {
    let request = request.into_inner();
    let (version, fresh) = (request.version, request.fresh);
    let selector = dead_selector(request.ids, request.lambda, request.collection)?;
    let redriven = role
        .dead_redrive(selector, version, fresh)
        .await
        .map_err(to_status)?;
    Ok(Response::new(proto::RedriveDeadResponse { redriven }))
}

pub(super) async fn purge_dead(
    role: Frontend,
    request: Request<proto::PurgeDeadRequest>,
) -> Result<Response<proto::PurgeDeadResponse>, Status> {
    let request = request.into_inner();
    let selector = dead_selector(request.ids, request.lambda, request.collection)?;
    let purged = role.dead_purge(selector).await.map_err(to_status)?;
    Ok(Response::new(proto::PurgeDeadResponse { purged }))
}

pub(super) async fn create_cron(
    role: Frontend,
    request: Request<proto::CreateCronRequest>,
) -> Result<Response<proto::CreateCronResponse>, Status> {
    let request = cron_request_from_proto(request.into_inner()).map_err(to_status)?;
    let schedule = role.cron_create(request).await.map_err(to_status)?;
    Ok(Response::new(proto::CreateCronResponse {
        cron: Some(cron_to_proto(schedule)),
    }))
}

pub(super) async fn preview_cron(
    role: Frontend,
    request: Request<proto::PreviewCronRequest>,
) -> Result<Response<proto::PreviewCronResponse>, Status> {
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

pub(super) async fn list_crons(
    role: Frontend,
) -> Result<Response<proto::ListCronsResponse>, Status> {
    let schedules = role.cron_list().await.map_err(to_status)?;
    Ok(Response::new(proto::ListCronsResponse {
        crons: schedules.into_iter().map(cron_to_proto).collect(),
    }))
}

pub(super) async fn delete_cron(
    role: Frontend,
    request: Request<proto::DeleteCronRequest>,
) -> Result<Response<proto::DeleteCronResponse>, Status> {
    let id = request.into_inner().id;
    role.cron_delete(&id).await.map_err(to_status)?;
    Ok(Response::new(proto::DeleteCronResponse {}))
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
