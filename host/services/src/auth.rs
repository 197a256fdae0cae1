//! API tokens: their secrets, and how a call's bearer token becomes its
//! [`Principal`].
//!
//! A token is a random secret shown once at creation; the store keeps only
//! its SHA-256, so a leaked database reveals no usable token. (The secrets
//! carry 256 random bits: a fast hash is enough, unlike for passwords.)
//! What each kind of token may do is `waft_core::access`'s table, which the
//! Frontend checks every call against.
//!
//! Authentication happens in the gRPC layer (`waft-api`), which resolves
//! the bearer token to a [`Principal`] once per call and hands the
//! Frontend's roles that principal; callers in one process (`waft dev`'s
//! roles calling each other) are the cluster.

use std::sync::Arc;

use sha2::{Digest, Sha256};
pub use waft_core::access::{Action, Call, Principal, Rule};
use waft_store::TaskStore;

use crate::{ServiceError, ServiceResult};

/// Prefix of every secret, so a leaked one is recognisable (and scanners
/// can find it).
const SECRET_PREFIX: &str = "waft_";

/// A new secret: the prefix and 256 random bits, hex.
pub fn new_secret() -> String {
    let bytes: [u8; 32] = rand::random();
    format!("{SECRET_PREFIX}{}", hex::encode(bytes))
}

/// What the store keeps of a secret.
pub fn hash_secret(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Resolves bearer tokens to principals.
pub struct Authenticator {
    /// Where client tokens are; `None` in a role without the store (the
    /// Controller), which only its peers call.
    store: Option<Arc<dyn TaskStore>>,
    /// The hash of the cluster token.
    cluster: Option<String>,
}

impl Authenticator {
    /// Accepts the tokens in `store` and `cluster_token`.
    pub fn new(store: Option<Arc<dyn TaskStore>>, cluster_token: Option<&str>) -> Self {
        Self {
            store,
            cluster: cluster_token.map(hash_secret),
        }
    }

    /// The principal of `secret`; `Unauthenticated` for a missing, unknown
    /// or revoked token.
    pub async fn authenticate(&self, secret: Option<&str>) -> ServiceResult<Principal> {
        let Some(secret) = secret.filter(|s| !s.is_empty()) else {
            return Err(ServiceError::Unauthenticated(
                "this server needs a token: pass --token or set WAFT_TOKEN".into(),
            ));
        };
        let hash = hash_secret(secret);
        if self.cluster.as_deref().is_some_and(|cluster| {
            // Equal lengths always; compare without an early exit.
            cluster
                .bytes()
                .zip(hash.bytes())
                .fold(0, |d, (a, b)| d | (a ^ b))
                == 0
        }) {
            return Ok(Principal::Cluster);
        }
        if let Some(store) = &self.store
            && let Some(token) = store.token_find(&hash).await?
        {
            return Ok(Principal::of(&token));
        }
        Err(ServiceError::Unauthenticated(
            "the token is unknown or revoked".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn secrets_are_random_and_only_the_cluster_token_passes_without_a_store() {
        let (a, b) = (new_secret(), new_secret());
        assert!(a.starts_with("waft_") && a.len() == 5 + 64 && a != b);
        assert_eq!(hash_secret(&a).len(), 64);
        let auth = Authenticator::new(None, Some(&a));
        assert_eq!(
            auth.authenticate(Some(&a)).await.unwrap(),
            Principal::Cluster
        );
        for wrong in [Some(b.as_str()), Some(""), None] {
            assert!(matches!(
                auth.authenticate(wrong).await,
                Err(ServiceError::Unauthenticated(_))
            ));
        }
    }
}
