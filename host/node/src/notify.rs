//! How the processes of `waft serve` tell each other what the roles would
//! tell each other directly in one process: tasks that come due (Frontend
//! to consumers), deploys (Frontend to Frontends, whose executors and
//! controllers follow them) and filled queues (consumers to Frontends,
//! whose controllers follow them). Postgres carries all three as
//! notifications; a lost one costs a refresh's or a sweep's delay, never a
//! task. A relay that reconnects may have missed some, and says so: the
//! lambdas are listed again, the backlog swept.

use std::sync::Arc;

use async_trait::async_trait;
use waft_queue::QueueKey;
use waft_services::{DueSignal, FillSignal, Fills, Frontend, Wake};
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

/// A consumer's fills across processes: Postgres notifications.
pub(crate) struct PostgresFills(pub(crate) PostgresStore);

#[async_trait]
impl FillSignal for PostgresFills {
    async fn filled(&self, queues: &[QueueKey]) {
        let queues: Vec<(&str, u8)> = (queues.iter())
            .map(|key| (key.lambda.as_str(), key.priority))
            .collect();
        if let Err(error) = self.0.notify_filled(&queues).await {
            tracing::warn!(%error, "cannot notify controllers of filled queues; their sweep finds them");
        }
    }
}

/// Notes in `fills` every queue a consumer anywhere filled, reconnecting as
/// needed; each connection may have missed some, which makes the
/// Controllers sweep.
pub(crate) async fn relay_fills(store: PostgresStore, fills: Fills) {
    loop {
        match store.listen_filled().await {
            Ok(mut listener) => {
                fills.note_missed();
                loop {
                    match listener.try_recv().await {
                        Ok(Some(notification)) => {
                            let queues: Vec<QueueKey> = PostgresStore::filled_queues(&notification)
                                .into_iter()
                                .map(|(lambda, priority)| QueueKey::new(lambda, priority))
                                .collect();
                            fills.note(&queues);
                        }
                        // The connection dropped: connect afresh, and say
                        // that fills may have been missed meanwhile.
                        Ok(None) => break,
                        Err(error) => {
                            tracing::warn!(%error, "lost the fill notifications; reconnecting");
                            break;
                        }
                    }
                }
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for fill notifications; controllers sweep the backlog");
            }
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

/// Tells this process's Frontend of every deploy and rollback made at any
/// Frontend (its own included: a harmless second wake-up), reconnecting as
/// needed.
pub(crate) async fn relay_lambdas(store: PostgresStore, frontend: Arc<Frontend>) {
    loop {
        match store.listen_lambdas().await {
            Ok(mut listener) => {
                // A deploy may have been missed while disconnected.
                frontend.note_lambdas_changed();
                loop {
                    match listener.try_recv().await {
                        Ok(Some(_)) => frontend.note_lambdas_changed(),
                        Ok(None) => break,
                        Err(error) => {
                            tracing::warn!(%error, "lost the deploy notifications; reconnecting");
                            break;
                        }
                    }
                }
            }
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
