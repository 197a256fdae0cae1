//! Where the store and the queues come from: the one place that turns their
//! configuration into backends.
//!
//! The store by its URL's scheme: `sqlite:PATH` (a file one process owns)
//! or `postgres://…`. The queues by kind: `memory` (in the process) or
//! `sqs`. `waft dev` defaults to a SQLite file in its data directory and
//! in-process queues, and takes either of the others; `waft serve` needs
//! what several processes can share, Postgres and SQS. A new store is a
//! new arm here and a crate implementing `TaskStore`; a new queue is a
//! module of `waft-queue` implementing `TaskQueue` and, here, a kind, its
//! settings' sub-section of `[queue]` and its arm in [`open_queues`].

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use waft_queue::{MemoryQueue, SqsConfig, SqsQueue, TaskQueue};
use waft_store::{PostgresStore, SqliteStore, TaskStore};

use crate::config::ConfigError;
use crate::{NodeError, Role};

/// An open task store.
pub enum StoreBackend {
    Sqlite(SqliteStore),
    Postgres(PostgresStore),
}

impl StoreBackend {
    /// Opens the store `url` names (`sqlite:PATH`, `postgres://…`).
    pub async fn open(url: &str, max_connections: u32) -> Result<Self, NodeError> {
        if let Some(path) = sqlite_path(url) {
            return Ok(Self::Sqlite(SqliteStore::open(path).await?));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(Self::Postgres(
                PostgresStore::connect(url, max_connections).await?,
            ));
        }
        Err(ConfigError::new(
            "store.url",
            "use postgres://user@host/db, or sqlite:PATH for one process",
        )
        .into())
    }

    /// The store as every role takes it.
    pub fn shared(&self) -> Arc<dyn TaskStore> {
        match self {
            Self::Sqlite(store) => Arc::new(store.clone()),
            Self::Postgres(store) => Arc::new(store.clone()),
        }
    }

    /// The Postgres store a role of `waft serve` needs: its state and its
    /// notifications are shared between processes; a SQLite file is not.
    pub fn into_shared_between_processes(self, role: Role) -> Result<PostgresStore, NodeError> {
        match self {
            Self::Postgres(store) => Ok(store),
            Self::Sqlite(_) => Err(one_process_store(role).into()),
        }
    }
}

/// The file a `sqlite:` URL names; `None` for any other URL.
pub(crate) fn sqlite_path(url: &str) -> Option<&Path> {
    let path = url.strip_prefix("sqlite:")?;
    Some(Path::new(path.strip_prefix("//").unwrap_or(path)))
}

/// Why a role of `waft serve` cannot take a SQLite store.
pub(crate) fn one_process_store(role: Role) -> ConfigError {
    ConfigError::new(
        "store.url",
        format!(
            "the {} role needs postgres://: a SQLite file belongs to one process (waft dev)",
            role.as_str()
        ),
    )
}

/// The queues: what every kind shares, and each kind's own settings in a
/// sub-section named after it (`[queue.sqs]`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueueSection {
    /// `memory` or `sqs`; `waft dev` defaults to `memory`, `waft serve`
    /// takes `sqs` only.
    pub kind: Option<QueueKind>,
    /// A received message comes back after it unless acknowledged (default
    /// 30s), whatever the kind.
    #[serde(deserialize_with = "waft_core::deserialize_duration")]
    pub visibility_timeout: Duration,
    /// SQS's own: `endpoint_url` (AWS itself when absent), `region`
    /// (default `us-east-1`) and `prefix` of queue names (default `waft`).
    pub sqs: SqsConfig,
}

impl Default for QueueSection {
    fn default() -> Self {
        Self {
            kind: None,
            visibility_timeout: Duration::from_secs(30),
            sqs: SqsConfig::default(),
        }
    }
}

/// Where the queues live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QueueKind {
    /// In the process: `waft dev`'s default.
    Memory,
    /// An SQS-compatible service: `waft serve`'s, and the only one it takes.
    Sqs,
}

impl QueueKind {
    /// Its name in `queue.kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Sqs => "sqs",
        }
    }

    /// Several processes may share these queues, as `waft serve`'s roles do.
    pub fn shared_between_processes(self) -> bool {
        match self {
            Self::Memory => false,
            Self::Sqs => true,
        }
    }
}

/// Opens the queues `section` names, `default` when it names none.
pub async fn open_queues(section: &QueueSection, default: QueueKind) -> Arc<dyn TaskQueue> {
    match section.kind.unwrap_or(default) {
        QueueKind::Memory => Arc::new(MemoryQueue::new(section.visibility_timeout)),
        QueueKind::Sqs => Arc::new(
            SqsQueue::new(SqsConfig {
                visibility_timeout: section.visibility_timeout,
                ..section.sqs.clone()
            })
            .await,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_store_is_chosen_by_its_urls_scheme() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite:{}", dir.path().join("waft.db").display());
        let store = StoreBackend::open(&url, 4).await.unwrap();
        assert!(matches!(store, StoreBackend::Sqlite(_)));
        store.shared().lambda_list().await.unwrap();
        let Err(NodeError::Config(error)) = store.into_shared_between_processes(Role::Hsc) else {
            panic!("a SQLite store is not shared between processes");
        };
        assert_eq!(error.key.as_deref(), Some("store.url"));
        let Err(NodeError::Config(error)) = StoreBackend::open("mysql://db/waft", 4).await else {
            panic!("an unknown scheme is refused");
        };
        assert!(error.to_string().contains("postgres://"), "{error}");
    }
}
