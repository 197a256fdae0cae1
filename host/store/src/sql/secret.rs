//! Secrets, sealed: the store keeps what the Frontend sealed and never sees
//! a value in clear. Each change bumps the lambda's `secrets_version`.

use super::{Connection, Store, lambda};
use crate::support::text_in;
use crate::{Result, SealedSecrets, SecretInfo, SecretSet, StoreError};

pub(super) async fn set(tx: &mut Connection, params: SecretSet) -> Result<()> {
    waft_core::grants::check_key(&params.name).map_err(|e| StoreError::Invalid(e.to_string()))?;
    lambda::require_lambda(&mut *tx, &params.lambda).await?;
    sqlx::query(
        "INSERT INTO secrets (lambda, name, sealed, updated_at) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (lambda, name) DO UPDATE SET sealed = excluded.sealed, \
         updated_at = excluded.updated_at",
    )
    .bind(&params.lambda)
    .bind(&params.name)
    .bind(&params.sealed)
    .bind(params.now)
    .execute(&mut *tx)
    .await?;
    bump(&mut *tx, &params.lambda).await?;
    Ok(())
}

pub(super) async fn remove(tx: &mut Connection, lambda: &str, name: &str) -> Result<bool> {
    let removed = sqlx::query("DELETE FROM secrets WHERE lambda = $1 AND name = $2")
        .bind(text_in(lambda))
        .bind(text_in(name))
        .execute(&mut *tx)
        .await?
        .rows_affected()
        == 1;
    if removed {
        bump(&mut *tx, lambda).await?;
    }
    Ok(removed)
}

pub(super) async fn list(store: &Store, lambda: &str) -> Result<Vec<SecretInfo>> {
    let mut conn = store.pool.acquire().await?;
    lambda::require_lambda(&mut conn, lambda).await?;
    let rows: Vec<(String, crate::Millis)> =
        sqlx::query_as("SELECT name, updated_at FROM secrets WHERE lambda = $1 ORDER BY name")
            .bind(text_in(lambda))
            .fetch_all(&mut *conn)
            .await?;
    Ok(rows
        .into_iter()
        .map(|(name, updated_at)| SecretInfo { name, updated_at })
        .collect())
}

pub(super) async fn sealed(store: &Store, lambda: &str) -> Result<SealedSecrets> {
    let mut tx = store.pool.begin().await?;
    let version: Option<i64> =
        sqlx::query_scalar("SELECT secrets_version FROM lambdas WHERE name = $1")
            .bind(text_in(lambda))
            .fetch_optional(&mut *tx)
            .await?;
    let version = version.ok_or_else(|| StoreError::UnknownLambda(lambda.to_owned()))?;
    let secrets: Vec<(String, Vec<u8>)> =
        sqlx::query_as("SELECT name, sealed FROM secrets WHERE lambda = $1 ORDER BY name")
            .bind(text_in(lambda))
            .fetch_all(&mut *tx)
            .await?;
    tx.commit().await?;
    Ok(SealedSecrets { version, secrets })
}

async fn bump(conn: &mut super::Connection, lambda: &str) -> Result<()> {
    sqlx::query("UPDATE lambdas SET secrets_version = secrets_version + 1 WHERE name = $1")
        .bind(lambda)
        .execute(&mut *conn)
        .await?;
    Ok(())
}
