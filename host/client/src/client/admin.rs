//! The Frontend's client for administration ([`AdminApi`]: tokens,
//! secrets) and for the installation's executors ([`ClusterApi`]:
//! components, artifacts, sealed secrets, word of new versions).

use std::time::Duration;

use async_trait::async_trait;
use waft_core::model::*;
use waft_core::roles::{AdminApi, ClusterApi};
use waft_core::{ServiceError, ServiceResult};

use super::answer;
use super::frontend::{FrontendClient, MAX_ARTIFACT_BYTES};
use crate::convert::*;
use crate::proto;

#[async_trait]
impl AdminApi for FrontendClient {
    async fn token_create(
        &self,
        name: &str,
        role: TokenRole,
        lambdas: Vec<String>,
    ) -> ServiceResult<(Token, String)> {
        let response = self
            .0
            .clone()
            .create_token(proto::CreateTokenRequest {
                name: name.to_owned(),
                role: token_role_to_proto(role) as i32,
                lambdas,
            })
            .await
            .map_err(Self::error)?
            .into_inner();
        let token = token_from_proto(answer(response.token, Self::ROLE)?)?;
        Ok((token, response.secret))
    }

    async fn token_list(&self) -> ServiceResult<Vec<Token>> {
        let response = self
            .0
            .clone()
            .list_tokens(proto::ListTokensRequest {})
            .await
            .map_err(Self::error)?;
        response
            .into_inner()
            .tokens
            .into_iter()
            .map(token_from_proto)
            .collect()
    }

    async fn token_revoke(&self, id: &str) -> ServiceResult<()> {
        self.0
            .clone()
            .revoke_token(proto::RevokeTokenRequest { id: id.to_owned() })
            .await
            .map_err(Self::error)?;
        Ok(())
    }

    async fn secret_set(&self, lambda: &str, name: &str, value: &str) -> ServiceResult<()> {
        self.0
            .clone()
            .set_secret(proto::SetSecretRequest {
                lambda: lambda.to_owned(),
                name: name.to_owned(),
                value: value.to_owned(),
            })
            .await
            .map_err(Self::error)?;
        Ok(())
    }

    async fn secret_list(&self, lambda: &str) -> ServiceResult<Vec<SecretInfo>> {
        let response = self
            .0
            .clone()
            .list_secrets(proto::ListSecretsRequest {
                lambda: lambda.to_owned(),
            })
            .await
            .map_err(Self::error)?;
        Ok(response
            .into_inner()
            .secrets
            .into_iter()
            .map(|secret| SecretInfo {
                name: secret.name,
                updated_at: secret.updated_at_ms,
            })
            .collect())
    }

    async fn secret_remove(&self, lambda: &str, name: &str) -> ServiceResult<()> {
        self.0
            .clone()
            .remove_secret(proto::RemoveSecretRequest {
                lambda: lambda.to_owned(),
                name: name.to_owned(),
            })
            .await
            .map_err(Self::error)?;
        Ok(())
    }
}

#[async_trait]
impl ClusterApi for FrontendClient {
    async fn artifact_get(&self, digest: &str, engine: &str) -> ServiceResult<Option<Artifact>> {
        let request = proto::GetArtifactRequest {
            digest: digest.to_owned(),
            engine: engine.to_owned(),
        };
        let mut chunks = match self.0.clone().get_artifact(request).await {
            Ok(response) => response.into_inner(),
            Err(status) if status.code() == tonic::Code::NotFound => return Ok(None),
            Err(status) => return Err(Self::error(status)),
        };
        let mut seal = Vec::new();
        let mut bytes = Vec::new();
        let mut size = 0;
        while let Some(chunk) = chunks.message().await.map_err(Self::error)? {
            if seal.is_empty() {
                seal = chunk.seal;
                size = usize::try_from(chunk.size).unwrap_or(usize::MAX);
                if size > MAX_ARTIFACT_BYTES {
                    return Err(ServiceError::ResourceExhausted(format!(
                        "the artifact of {digest} is {size} bytes; the most a client takes is {MAX_ARTIFACT_BYTES}"
                    )));
                }
                bytes.reserve_exact(size);
            }
            if bytes.len() + chunk.chunk.len() > size {
                return Err(ServiceError::Internal(format!(
                    "the {} sent more of the artifact of {digest} than it announced",
                    Self::ROLE
                )));
            }
            bytes.extend_from_slice(&chunk.chunk);
        }
        Ok(Some(Artifact {
            engine: engine.to_owned(),
            bytes,
            seal,
        }))
    }

    async fn lambda_changed(&self, seen: u64, wait: Duration) -> ServiceResult<u64> {
        let request = proto::WaitLambdaChangeRequest {
            seen,
            wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
        };
        let response = self
            .0
            .clone()
            .wait_lambda_change(request)
            .await
            .map_err(Self::error)?;
        Ok(response.into_inner().generation)
    }

    async fn queue_filled(&self, seen: u64, wait: Duration) -> ServiceResult<QueueFills> {
        let request = proto::WaitQueueFillRequest {
            seen,
            wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
        };
        let response = self
            .0
            .clone()
            .wait_queue_fill(request)
            .await
            .map_err(Self::error)?;
        queue_fills(response.into_inner())
    }

    async fn queue_backlog(&self) -> ServiceResult<Vec<Backlog>> {
        let response = self
            .0
            .clone()
            .list_queue_backlog(proto::ListQueueBacklogRequest {})
            .await
            .map_err(Self::error)?;
        (response.into_inner().backlog.into_iter())
            .map(backlog)
            .collect()
    }

    async fn component_get(&self, digest: &str) -> ServiceResult<Vec<u8>> {
        let response = self
            .0
            .clone()
            .get_component(proto::GetComponentRequest {
                digest: digest.to_owned(),
            })
            .await
            .map_err(Self::error)?;
        Ok(response.into_inner().component)
    }

    async fn secret_sealed(&self, lambda: &str) -> ServiceResult<SealedSecrets> {
        let response = self
            .0
            .clone()
            .sealed_secrets(proto::SealedSecretsRequest {
                lambda: lambda.to_owned(),
            })
            .await
            .map_err(Self::error)?
            .into_inner();
        Ok(SealedSecrets {
            version: response.version,
            secrets: response
                .secrets
                .into_iter()
                .map(|secret| (secret.name, secret.sealed))
                .collect(),
        })
    }
}
