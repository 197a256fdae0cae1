//! Tokens, stored by the hash of their secret.

use waft_core::task::check_lambda_name;

use super::{Connection, Store};
use crate::rows::{self};
use crate::support::text_in;
use crate::{Millis, Result, StoreError, Token, TokenCreate, TokenRole};

pub(super) async fn create(tx: &mut Connection, params: TokenCreate) -> Result<()> {
    let token = params.token;
    if token.role != TokenRole::Admin && token.lambdas.is_empty() {
        return Err(StoreError::Invalid(format!(
            "a {} token needs the lambdas it may act on",
            token.role.as_str()
        )));
    }
    for lambda in &token.lambdas {
        check_lambda_name(lambda)?;
    }
    let lambdas =
        serde_json::to_string(&token.lambdas).map_err(|e| StoreError::Invalid(e.to_string()))?;
    sqlx::query(
        "INSERT INTO tokens (id, name, role, lambdas, hash, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(&token.id)
    .bind(text_in(&token.name))
    .bind(token.role.as_str())
    .bind(lambdas)
    .bind(&params.hash)
    .bind(token.created_at)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

pub(super) async fn list(store: &Store) -> Result<Vec<Token>> {
    let rows = sqlx::query(
        "SELECT id, name, role, lambdas, created_at, revoked_at FROM tokens ORDER BY id",
    )
    .fetch_all(&store.pool)
    .await?;
    rows.iter().map(rows::token).collect()
}

pub(super) async fn revoke(tx: &mut Connection, id: &str, now: Millis) -> Result<bool> {
    let revoked =
        sqlx::query("UPDATE tokens SET revoked_at = COALESCE(revoked_at, $2) WHERE id = $1")
            .bind(text_in(id))
            .bind(now)
            .execute(&mut *tx)
            .await?
            .rows_affected();
    Ok(revoked == 1)
}

pub(super) async fn find(store: &Store, hash: &str) -> Result<Option<Token>> {
    let row = sqlx::query(
        "SELECT id, name, role, lambdas, created_at, revoked_at FROM tokens \
         WHERE hash = $1 AND revoked_at IS NULL",
    )
    .bind(text_in(hash))
    .fetch_optional(&store.pool)
    .await?;
    row.as_ref().map(rows::token).transpose()
}
