//! Tokens: found by hash until revoked.

use waft_store::{StoreError, TaskStore, Token, TokenCreate, TokenRole};

use crate::support::*;

/// Tokens are found by the hash of their secret until revoked.
pub async fn tokens_are_found_by_hash_until_revoked(store: &dyn TaskStore) {
    let owner = Token {
        id: "tok1".into(),
        name: "mail team".into(),
        role: TokenRole::Owner,
        lambdas: vec!["mail".into()],
        created_at: T0,
        revoked_at: None,
    };
    store
        .token_create(TokenCreate {
            token: owner.clone(),
            hash: "hash-1".into(),
        })
        .await
        .unwrap();
    assert_eq!(
        store.token_find("hash-1").await.unwrap(),
        Some(owner.clone())
    );
    assert_eq!(store.token_find("hash-2").await.unwrap(), None);
    let lambdaless = store
        .token_create(TokenCreate {
            token: Token {
                id: "tok2".into(),
                lambdas: Vec::new(),
                ..owner.clone()
            },
            hash: "hash-2".into(),
        })
        .await;
    assert!(
        matches!(lambdaless, Err(StoreError::Invalid(_))),
        "{lambdaless:?}"
    );
    assert!(store.token_revoke("tok1", T0 + 1).await.unwrap());
    assert_eq!(store.token_find("hash-1").await.unwrap(), None);
    let listed = store.token_list().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].revoked_at, Some(T0 + 1));
    assert!(!store.token_revoke("nope", T0).await.unwrap());
}
