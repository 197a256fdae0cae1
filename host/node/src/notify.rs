//! How the processes of `waft serve` tell each other what the Frontend
//! would tell its consumer and executors directly in one process: tasks
//! that come due, and deploys. Postgres carries both as notifications; a
//! lost one costs a poll's delay, never a task.

use std::sync::Arc;

use async_trait::async_trait;
use waft_services::{DueSignal, Frontend, Wake};
use waft_store::PostgresStore;

/// The Frontend's signals across processes: Postgres notifications.
pub(crate) struct PostgresDue(pub(crate) PostgresStore);

#[async_trait]
impl DueSignal for PostgresDue {
    async fn due(&self, at: waft_store::Millis) {
        if let Err(error) = self.0.notify_due(at).await {
            tracing::warn!(%error, "cannot notify consumers; due tasks wait for the next poll");
        }
    }

    async fn lambdas_changed(&self) {
        if let Err(error) = self.0.notify_lambdas().await {
            tracing::warn!(%error, "cannot notify other Frontends of a deploy; their executors refresh on their timer");
        }
    }
}

/// Tells this process's Frontend of every deploy and rollback made at any
/// Frontend (its own included: a harmless second wake-up), reconnecting as
/// needed.
pub(crate) async fn relay_lambdas(store: PostgresStore, frontend: Arc<Frontend>) {
    loop {
        match store.listen_lambdas().await {
            Ok(mut listener) => loop {
                match listener.recv().await {
                    Ok(_) => frontend.note_lambdas_changed(),
                    Err(error) => {
                        tracing::warn!(%error, "lost the deploy notifications; reconnecting");
                        break;
                    }
                }
            },
            Err(error) => {
                tracing::warn!(%error, "cannot listen for deploy notifications; executors refresh on their timer");
            }
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

/// Wakes the consumer for every due notification, at the time it carries,
/// reconnecting as needed.
pub(crate) async fn relay_due(store: PostgresStore, wake: Wake) {
    loop {
        match store.listen_due().await {
            Ok(mut listener) => loop {
                match listener.recv().await {
                    Ok(notification) => match PostgresStore::due_time(&notification) {
                        Some(at) => wake.wake_at(at),
                        None => wake.wake(),
                    },
                    Err(error) => {
                        tracing::warn!(%error, "lost the due-task notifications; reconnecting");
                        break;
                    }
                }
            },
            Err(error) => {
                tracing::warn!(%error, "cannot listen for due-task notifications; polling only");
            }
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}
