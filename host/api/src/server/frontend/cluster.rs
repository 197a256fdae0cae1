//! The installation's own calls over gRPC (`waft_services::api::ClusterApi`):
//! executors fetch components, compiled artifacts (streamed in chunks)
//! and sealed secrets; executors and controllers wait for lambda changes
//! and queue fills, and read the queues' backlog. Clients do not make
//! these calls; they are kept apart so the cluster's traffic reads on its
//! own.

use std::time::Duration;

use tonic::{Request, Response, Status};
use waft_client::convert::*;
use waft_client::proto;
use waft_client::status::to_status;
use waft_services::Frontend;
use waft_services::api::ClusterApi;

use super::Progress;

/// Bytes of an artifact per message: well under every message limit.
const ARTIFACT_CHUNK: usize = 2 << 20;

pub(super) async fn get_component(
    role: Frontend,
    request: Request<proto::GetComponentRequest>,
) -> Result<Response<proto::GetComponentResponse>, Status> {
    let component = role
        .component_get(&request.into_inner().digest)
        .await
        .map_err(to_status)?;
    Ok(Response::new(proto::GetComponentResponse { component }))
}

pub(super) async fn get_artifact(
    role: Frontend,
    request: Request<proto::GetArtifactRequest>,
) -> Result<Response<Progress<proto::GetArtifactResponse>>, Status> {
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

pub(super) async fn wait_lambda_change(
    role: Frontend,
    request: Request<proto::WaitLambdaChangeRequest>,
) -> Result<Response<proto::WaitLambdaChangeResponse>, Status> {
    let request = request.into_inner();
    let generation = role
        .lambda_changed(request.seen, Duration::from_millis(request.wait_ms))
        .await
        .map_err(to_status)?;
    Ok(Response::new(proto::WaitLambdaChangeResponse {
        generation,
    }))
}

pub(super) async fn wait_queue_fill(
    role: Frontend,
    request: Request<proto::WaitQueueFillRequest>,
) -> Result<Response<proto::WaitQueueFillResponse>, Status> {
    let request = request.into_inner();
    let fills = role
        .queue_filled(request.seen, Duration::from_millis(request.wait_ms))
        .await
        .map_err(to_status)?;
    Ok(Response::new(queue_fills_to_proto(fills)))
}

pub(super) async fn list_queue_backlog(
    role: Frontend,
) -> Result<Response<proto::ListQueueBacklogResponse>, Status> {
    let backlog = role.queue_backlog().await.map_err(to_status)?;
    Ok(Response::new(proto::ListQueueBacklogResponse {
        backlog: backlog.into_iter().map(backlog_to_proto).collect(),
    }))
}

pub(super) async fn sealed_secrets(
    role: Frontend,
    request: Request<proto::SealedSecretsRequest>,
) -> Result<Response<proto::SealedSecretsResponse>, Status> {
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
