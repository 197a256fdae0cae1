//! The Frontend's administration ([`AdminApi`]: tokens, secrets) and what
//! it serves the installation's executors ([`ClusterApi`]). Each call
//! checks its caller first (`access.rs`).

use std::time::Duration;

use async_trait::async_trait;
use waft_core::access::Call;
use waft_store::{
    Artifact, Backlog, QueueFills, SealedSecrets, SecretInfo, SecretSet, Token, TokenCreate,
    TokenRole,
};

use super::{Frontend, MAX_CHANGE_WAIT};
use crate::api::{AdminApi, ClusterApi};
use crate::{ServiceError, ServiceResult, auth};

#[async_trait]
impl AdminApi for Frontend {
    async fn token_create(
        &self,
        name: &str,
        role: TokenRole,
        lambdas: Vec<String>,
    ) -> ServiceResult<(Token, String)> {
        self.allow(Call::TokenCreate, None)?;
        if name.is_empty() || name.len() > 200 {
            return Err(ServiceError::InvalidArgument(
                "a token's name is 1 to 200 bytes".into(),
            ));
        }
        if role == TokenRole::Admin && !lambdas.is_empty() {
            return Err(ServiceError::InvalidArgument(
                "an admin token has every lambda; name lambdas only for owner or scheduler tokens"
                    .into(),
            ));
        }
        let secret = auth::new_secret();
        let token = Token {
            id: waft_store::new_id(),
            name: name.to_owned(),
            role,
            lambdas,
            created_at: self.clock.now(),
            revoked_at: None,
        };
        self.store
            .token_create(TokenCreate {
                token: token.clone(),
                hash: auth::hash_secret(&secret),
            })
            .await?;
        tracing::info!(token = %token.id, name, role = role.as_str(), "token created");
        Ok((token, secret))
    }

    async fn token_list(&self) -> ServiceResult<Vec<Token>> {
        self.allow(Call::TokenList, None)?;
        Ok(self.store.token_list().await?)
    }

    async fn token_revoke(&self, id: &str) -> ServiceResult<()> {
        self.allow(Call::TokenRevoke, None)?;
        if !self.store.token_revoke(id, self.clock.now()).await? {
            return Err(ServiceError::NotFound(format!("no token {id}")));
        }
        tracing::info!(token = id, "token revoked");
        Ok(())
    }

    async fn secret_set(&self, lambda: &str, name: &str, value: &str) -> ServiceResult<()> {
        self.allow(Call::SecretSet, Some(lambda))?;
        let key = self.secrets.as_ref().ok_or_else(|| {
            ServiceError::FailedPrecondition(
                "this Frontend has no secrets key: set secrets.key_file \
                 (waft dev makes one in its data directory)"
                    .into(),
            )
        })?;
        waft_core::grants::check_key(name)
            .map_err(|e| ServiceError::InvalidArgument(e.to_string()))?;
        if value.len() > waft_core::Grants::MAX_VALUE {
            return Err(ServiceError::InvalidArgument(format!(
                "secret {name} is {} bytes; at most {} are allowed",
                value.len(),
                waft_core::Grants::MAX_VALUE
            )));
        }
        self.store
            .secret_set(SecretSet {
                lambda: lambda.to_owned(),
                name: name.to_owned(),
                sealed: key.seal(lambda, name, value),
                now: self.clock.now(),
            })
            .await?;
        tracing::info!(lambda, secret = name, "secret set");
        Ok(())
    }

    async fn secret_list(&self, lambda: &str) -> ServiceResult<Vec<SecretInfo>> {
        self.allow(Call::SecretList, Some(lambda))?;
        Ok(self.store.secret_list(lambda).await?)
    }

    async fn secret_remove(&self, lambda: &str, name: &str) -> ServiceResult<()> {
        self.allow(Call::SecretRemove, Some(lambda))?;
        if !self.store.secret_remove(lambda, name).await? {
            return Err(ServiceError::NotFound(format!(
                "lambda {lambda:?} has no secret {name:?}"
            )));
        }
        tracing::info!(lambda, secret = name, "secret removed");
        Ok(())
    }
}

#[async_trait]
impl ClusterApi for Frontend {
    async fn secret_sealed(&self, lambda: &str) -> ServiceResult<SealedSecrets> {
        self.allow(Call::SecretSealed, Some(lambda))?;
        Ok(self.store.secret_sealed(lambda).await?)
    }

    async fn component_get(&self, digest: &str) -> ServiceResult<Vec<u8>> {
        self.allow(Call::ComponentGet, None)?;
        self.store
            .component_get(digest)
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("no component with digest {digest}")))
    }

    async fn artifact_get(&self, digest: &str, engine: &str) -> ServiceResult<Option<Artifact>> {
        self.allow(Call::ArtifactGet, None)?;
        Ok(self.store.artifact_get(digest, engine).await?)
    }

    async fn lambda_changed(&self, seen: u64, wait: Duration) -> ServiceResult<u64> {
        self.allow(Call::LambdaChanged, None)?;
        let mut generation = self.generation.subscribe();
        let changed = generation.wait_for(|now| *now != seen);
        // The sender lives as long as `self`: waiting ends by a change or
        // the time.
        let _ = tokio::time::timeout(wait.min(MAX_CHANGE_WAIT), changed).await;
        Ok(*generation.borrow())
    }

    async fn queue_filled(&self, seen: u64, wait: Duration) -> ServiceResult<QueueFills> {
        self.allow(Call::QueueFilled, None)?;
        Ok(self.fills.wait(seen, wait.min(MAX_CHANGE_WAIT)).await)
    }

    async fn queue_backlog(&self) -> ServiceResult<Vec<Backlog>> {
        self.allow(Call::QueueBacklog, None)?;
        Ok(self.store.task_backlog(self.clock.now()).await?)
    }
}
