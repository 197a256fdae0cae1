//! Administration over gRPC: API tokens (create, list, revoke) and lambda
//! secrets (set, list, remove), the calls of
//! `waft_services::api::AdminApi`. They grant access or hold secret
//! values, so they are kept apart from the calls about tasks and lambdas;
//! who may make each is for `waft_core::access` to say, as everywhere.

use tonic::{Request, Response, Status};
use waft_client::convert::*;
use waft_client::proto;
use waft_client::status::to_status;
use waft_services::Frontend;
use waft_services::api::AdminApi;

pub(super) async fn create_token(
    role: Frontend,
    request: Request<proto::CreateTokenRequest>,
) -> Result<Response<proto::CreateTokenResponse>, Status> {
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

pub(super) async fn list_tokens(
    role: Frontend,
) -> Result<Response<proto::ListTokensResponse>, Status> {
    let tokens = role.token_list().await.map_err(to_status)?;
    Ok(Response::new(proto::ListTokensResponse {
        tokens: tokens.into_iter().map(token_to_proto).collect(),
    }))
}

pub(super) async fn revoke_token(
    role: Frontend,
    request: Request<proto::RevokeTokenRequest>,
) -> Result<Response<proto::RevokeTokenResponse>, Status> {
    role.token_revoke(&request.into_inner().id)
        .await
        .map_err(to_status)?;
    Ok(Response::new(proto::RevokeTokenResponse {}))
}

pub(super) async fn set_secret(
    role: Frontend,
    request: Request<proto::SetSecretRequest>,
) -> Result<Response<proto::SetSecretResponse>, Status> {
    let request = request.into_inner();
    role.secret_set(&request.lambda, &request.name, &request.value)
        .await
        .map_err(to_status)?;
    Ok(Response::new(proto::SetSecretResponse {}))
}

pub(super) async fn list_secrets(
    role: Frontend,
    request: Request<proto::ListSecretsRequest>,
) -> Result<Response<proto::ListSecretsResponse>, Status> {
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

pub(super) async fn remove_secret(
    role: Frontend,
    request: Request<proto::RemoveSecretRequest>,
) -> Result<Response<proto::RemoveSecretResponse>, Status> {
    let request = request.into_inner();
    role.secret_remove(&request.lambda, &request.name)
        .await
        .map_err(to_status)?;
    Ok(Response::new(proto::RemoveSecretResponse {}))
}
