//! Waft's processes: the roles of `waft-services` wired to their stores,
//! queues and peers, and put on the network.
//!
//! [`start_dev`] runs every role in one process on the embedded stack — a
//! SQLite file and in-process queues, unless the configuration names others
//! — and the roles call each other directly. [`start_role`] runs one role
//! on Postgres and SQS, reaching the other roles through gRPC clients that
//! implement the same traits. Both go through one wiring (`wiring.rs`),
//! which opens the store and queues in one place ([`backends`]) and
//! validates the whole configuration before binding a port.

pub mod backends;
pub mod config;
mod data_dir;
mod listen;
mod metrics;
mod notify;
mod wiring;

use std::net::SocketAddr;
use std::path::PathBuf;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use waft_services::ServiceError;

use crate::wiring::Mode;

pub use config::{Config, ConfigError, Role};

/// Why a process could not start.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot open the task store: {0}")]
    Store(#[from] waft_store::StoreError),
    #[error("cannot start the WebAssembly runtime: {0}")]
    Runtime(#[from] waft_runtime::RuntimeError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot create {path}: {source}")]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path} is in use by another process{}: one `waft dev` at a time may run on a data \
         directory; stop that one, or give this one another --data-dir",
        if holder.is_empty() { String::new() } else { format!(" (pid {holder})") }
    )]
    DataDirInUse { path: PathBuf, holder: String },
    #[error("invalid peer address: {0}")]
    Peer(ServiceError),
    #[error("cannot read {path}: {source}")]
    Tls {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A running Waft process.
pub struct Node {
    /// Where its gRPC server listens.
    pub addr: SocketAddr,
    /// Where it serves `/metrics`, when configured to.
    pub metrics_addr: Option<SocketAddr>,
    stop: CancellationToken,
    tasks: JoinSet<()>,
    /// `waft dev`'s data directory, held until the process has stopped.
    _data_dir: Option<data_dir::DataDirLock>,
}

impl Node {
    /// Stops it: the server stops taking calls, executors let running tasks
    /// finish within their grace period, loops end.
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// Waits until everything has stopped.
    pub async fn wait(mut self) {
        while let Some(result) = self.tasks.join_next().await {
            if let Err(error) = result
                && error.is_panic()
            {
                tracing::error!(%error, "a part of the process panicked");
                self.stop.cancel();
            }
        }
    }

    /// Stops it and waits.
    pub async fn shutdown(self) {
        self.stop();
        self.wait().await;
    }
}

/// What `waft dev` runs: every role in one process.
#[derive(Debug, Clone)]
pub struct DevOptions {
    /// The SQLite file and the compiled-component cache live here.
    pub data_dir: PathBuf,
    pub config: Config,
}

/// Starts every role in one process, by default on SQLite and in-process
/// queues.
pub async fn start_dev(options: DevOptions) -> Result<Node, NodeError> {
    let mode = Mode::Dev {
        data_dir: options.data_dir,
    };
    wiring::start(&mode, &options.config).await
}

/// Starts one role on Postgres and SQS.
pub async fn start_role(role: Role, config: Config) -> Result<Node, NodeError> {
    wiring::start(&Mode::Serve(role), &config).await
}
