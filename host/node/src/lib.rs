//! Waft's processes: the roles of `waft-services` wired to their stores,
//! queues and peers, and put on the network.
//!
//! [`start_dev`] runs every role in one process on the embedded stack — a
//! SQLite file and in-process queues, unless the configuration names others
//! — and the roles call each other directly. [`start_role`] runs one role
//! on Postgres and SQS, reaching the other roles through gRPC clients that
//! implement the same traits. Both open their store and queues in one place
//! ([`backends`]) and validate the whole configuration before binding a
//! port.

pub mod backends;
pub mod config;
mod metrics;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tonic::transport::Identity;
use waft_api::{
    AllowedHosts, ChannelOptions, ControllerClient, FrontendClient, HscClient, Roles, WaftChannel,
};
use waft_runtime::{Allocator, Runtime, RuntimeConfig};
use waft_services::auth::Authenticator;
use waft_services::secrets::SecretKey;
use waft_services::{
    Clock, Controller, DueSignal, Executor, ExecutorConfig, Frontend, Hsc, ServiceError,
    StoreClock, StoreConsumer, Wake,
};
use waft_store::{PostgresStore, SqliteStore, TaskStore};

use crate::backends::{QueueKind, StoreBackend, open_queues};

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

/// Starts every role in one process on SQLite and in-process queues.
pub async fn start_dev(options: DevOptions) -> Result<Node, NodeError> {
    let config = &options.config;
    config.validate(None)?;
    std::fs::create_dir_all(&options.data_dir).map_err(|source| NodeError::DataDir {
        path: options.data_dir.clone(),
        source,
    })?;
    let store = match &config.store.url {
        Some(url) => StoreBackend::open(url, config.store.max_connections).await?,
        None => StoreBackend::Sqlite(SqliteStore::open(&options.data_dir.join("waft.db")).await?),
    }
    .shared();
    let queue = open_queues(&config.queue, QueueKind::Memory).await;
    let stop = CancellationToken::new();
    let clock: Arc<dyn Clock> = StoreClock::start(store.clone(), stop.clone()).await?;
    let runtime = Arc::new(Runtime::new(RuntimeConfig {
        cache_dir: Some(
            config
                .runtime
                .cache_dir
                .clone()
                .unwrap_or_else(|| options.data_dir.join("cache")),
        ),
        outbound_ca: config.runtime.outbound_ca.clone(),
        max_instances: instances_for(config),
        ..RuntimeConfig::default()
    })?);
    let consumer = StoreConsumer::new(
        store.clone(),
        queue.clone(),
        clock.clone(),
        config.consumer.clone(),
    );
    let heartbeat = config.heartbeat;
    let key_file = config
        .secrets
        .key_file
        .clone()
        .unwrap_or_else(|| options.data_dir.join("secrets.key"));
    let secret_key = Arc::new(
        SecretKey::read_or_create(&key_file)
            .map_err(|e| ConfigError::new("secrets.key_file", e.to_string()))?,
    );
    let frontend = Arc::new(
        Frontend::new(
            store.clone(),
            clock.clone(),
            runtime.clone(),
            Arc::new(consumer.waker()),
        )
        .keep_versions(config.store.keep_versions)
        .secrets(secret_key.clone()),
    );
    let auth_store = store.clone();
    let hsc = Arc::new(Hsc::new(store, clock, heartbeat));
    let controller = Controller::new(
        queue,
        hsc.clone(),
        frontend.clone(),
        config.controller.clone(),
    );
    let executor = Executor::new(
        runtime,
        Arc::new(controller.clone()),
        hsc.clone(),
        frontend.clone(),
        ExecutorConfig {
            heartbeat,
            ..config.executor.clone()
        },
        Some(secret_key),
    )
    .map_err(|e| ConfigError::new("executor.journal", e.to_string()))?;
    let listener = bind(config.listen).await?;
    let mut node = Node {
        addr: local_addr(&listener, config.listen)?,
        metrics_addr: None,
        stop,
        tasks: JoinSet::new(),
    };
    let stop = node.stop.clone();
    node.tasks
        .spawn(async move { consumer.run(stop.cancelled_owned()).await });
    let stop = node.stop.clone();
    let polling = controller.clone();
    node.tasks
        .spawn(async move { polling.run(stop.cancelled_owned()).await });
    let stop = node.stop.clone();
    node.tasks.spawn(executor.run(stop.cancelled_owned()));
    let roles = Roles {
        frontend: Some(frontend),
        controller: Some(Arc::new(controller)),
        hsc: Some(hsc),
        auth: authenticator(config, Some(auth_store)),
        tls: identity(config)?,
        allowed_hosts: AllowedHosts::new(config.answered_hosts()),
    };
    spawn_server(&mut node, listener, roles);
    spawn_metrics(&mut node, config).await?;
    Ok(node)
}

/// Starts one role on Postgres and SQS.
pub async fn start_role(role: Role, config: Config) -> Result<Node, NodeError> {
    config.validate(Some(role))?;
    let heartbeat = config.heartbeat;
    let mut node = Node {
        addr: config.listen,
        metrics_addr: None,
        stop: CancellationToken::new(),
        tasks: JoinSet::new(),
    };
    let mut roles = Roles::default();
    match role {
        Role::Frontend => {
            let store = postgres(&config, role).await?;
            // Only checks components at deploy: no pool of instances. Each
            // check instantiates under the lambda's own limits and the store
            // limiter (memories together, tables, host resources), so it
            // costs this process no more than one execution would.
            let runtime = Arc::new(Runtime::new(RuntimeConfig {
                allocator: Allocator::OnDemand,
                cache_dir: config.runtime.cache_dir.clone(),
                ..RuntimeConfig::default()
            })?);
            let due = Arc::new(PostgresDue(store.clone()));
            let store: Arc<dyn TaskStore> = Arc::new(store);
            let clock = StoreClock::start(store.clone(), node.stop.clone()).await?;
            roles.auth = authenticator(&config, Some(store.clone()));
            let frontend = Arc::new(
                match secret_key(&config)? {
                    Some(key) => Frontend::new(store, clock, runtime, due.clone()).secrets(key),
                    None => Frontend::new(store, clock, runtime, due.clone()),
                }
                .keep_versions(config.store.keep_versions),
            );
            let stop = node.stop.clone();
            let relayed = frontend.clone();
            node.tasks.spawn(async move {
                tokio::select! {
                    () = stop.cancelled() => {}
                    () = relay_lambdas(due.0.clone(), relayed) => {}
                }
            });
            roles.frontend = Some(frontend);
        }
        Role::Hsc => {
            let store: Arc<dyn TaskStore> = Arc::new(postgres(&config, role).await?);
            let clock = StoreClock::start(store.clone(), node.stop.clone()).await?;
            roles.auth = authenticator(&config, Some(store.clone()));
            roles.hsc = Some(Arc::new(Hsc::new(store, clock, heartbeat)));
        }
        Role::Consumer => {
            let store = postgres(&config, role).await?;
            let queue = open_queues(&config.queue, QueueKind::Sqs).await;
            let clock = StoreClock::start(Arc::new(store.clone()), node.stop.clone()).await?;
            let consumer = StoreConsumer::new(
                Arc::new(store.clone()),
                queue,
                clock,
                config.consumer.clone(),
            );
            let wake = consumer.waker();
            let stop = node.stop.clone();
            node.tasks
                .spawn(async move { consumer.run(stop.cancelled_owned()).await });
            let stop = node.stop.clone();
            node.tasks.spawn(async move {
                tokio::select! {
                    () = stop.cancelled() => {}
                    () = relay_due(store, wake) => {}
                }
            });
        }
        Role::Controller => {
            let queue = open_queues(&config.queue, QueueKind::Sqs).await;
            let controller = Controller::new(
                queue,
                Arc::new(HscClient::new(peer(&config, &config.peers.hsc)?)),
                Arc::new(FrontendClient::new(peer(&config, &config.peers.frontend)?)),
                config.controller.clone(),
            );
            let stop = node.stop.clone();
            let polling = controller.clone();
            node.tasks
                .spawn(async move { polling.run(stop.cancelled_owned()).await });
            roles.controller = Some(Arc::new(controller));
            roles.auth = authenticator(&config, None);
        }
        Role::Executor => {
            let runtime = Arc::new(Runtime::new(RuntimeConfig {
                cache_dir: config.runtime.cache_dir.clone(),
                outbound_ca: config.runtime.outbound_ca.clone(),
                max_instances: instances_for(&config),
                ..RuntimeConfig::default()
            })?);
            let executor = Executor::new(
                runtime,
                Arc::new(ControllerClient::new(peer(
                    &config,
                    &config.peers.controller,
                )?)),
                Arc::new(HscClient::new(peer(&config, &config.peers.hsc)?)),
                Arc::new(FrontendClient::new(peer(&config, &config.peers.frontend)?)),
                ExecutorConfig {
                    heartbeat,
                    ..config.executor.clone()
                },
                secret_key(&config)?,
            )
            .map_err(|e| ConfigError::new("executor.journal", e.to_string()))?;
            let stop = node.stop.clone();
            node.tasks.spawn(executor.run(stop.cancelled_owned()));
        }
    }
    roles.tls = identity(&config)?;
    roles.allowed_hosts = AllowedHosts::new(config.answered_hosts());
    let listener = bind(config.listen).await?;
    node.addr = local_addr(&listener, config.listen)?;
    spawn_server(&mut node, listener, roles);
    spawn_metrics(&mut node, &config).await?;
    Ok(node)
}

/// Instance slots: one per task at once, and room for deploy checks.
fn instances_for(config: &Config) -> u32 {
    u32::try_from(config.executor.max_tasks)
        .unwrap_or(u32::MAX)
        .saturating_add(16)
}

/// The Postgres store a role of `waft serve` shares with the others.
async fn postgres(config: &Config, role: Role) -> Result<PostgresStore, NodeError> {
    let url = config
        .store
        .url
        .as_deref()
        .ok_or_else(|| ConfigError::new("store.url", "required"))?;
    StoreBackend::open(url, config.store.max_connections)
        .await?
        .into_shared_between_processes(role)
}

/// A channel to a peer role: the cluster token when auth is on, TLS when
/// a CA is configured.
fn peer(config: &Config, address: &Option<String>) -> Result<WaftChannel, NodeError> {
    let address = address
        .as_deref()
        .ok_or_else(|| ConfigError::new("peers", "a peer address is missing"))?;
    let token = config
        .auth
        .enabled
        .then_some(config.auth.cluster_token.as_deref())
        .flatten();
    let ca = config.tls.ca.as_deref().map(read_pem).transpose()?;
    let options = ChannelOptions {
        token,
        ca: ca.as_deref(),
    };
    waft_api::channel_with(address, options).map_err(NodeError::Peer)
}

fn read_pem(path: &std::path::Path) -> Result<Vec<u8>, NodeError> {
    std::fs::read(path).map_err(|source| NodeError::Tls {
        path: path.to_owned(),
        source,
    })
}

/// This process's TLS identity, when it has a certificate.
fn identity(config: &Config) -> Result<Option<Identity>, NodeError> {
    match (&config.tls.cert, &config.tls.key) {
        (Some(cert), Some(key)) => {
            // Both of rustls's crypto backends are linked (the AWS SDK brings
            // the other one); the server's TLS needs the process to pick one.
            // Failing means one is installed already: fine.
            let _ = rustls::crypto::ring::default_provider().install_default();
            Ok(Some(Identity::from_pem(read_pem(cert)?, read_pem(key)?)))
        }
        _ => Ok(None),
    }
}

/// The authenticator of this process's server: `None` when auth is off.
/// Roles without the store accept only the cluster token.
/// The secrets key `secrets.key_file` names, if it names one.
fn secret_key(config: &Config) -> Result<Option<Arc<SecretKey>>, ConfigError> {
    config
        .secrets
        .key_file
        .as_deref()
        .map(|path| {
            SecretKey::read(path)
                .map(Arc::new)
                .map_err(|e| ConfigError::new("secrets.key_file", e.to_string()))
        })
        .transpose()
}

fn authenticator(config: &Config, store: Option<Arc<dyn TaskStore>>) -> Option<Arc<Authenticator>> {
    if !config.auth.enabled {
        return None;
    }
    Some(Arc::new(Authenticator::new(
        store,
        config.auth.cluster_token.as_deref(),
    )))
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, NodeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| NodeError::Bind { addr, source })
}

fn local_addr(listener: &TcpListener, addr: SocketAddr) -> Result<SocketAddr, NodeError> {
    listener
        .local_addr()
        .map_err(|source| NodeError::Bind { addr, source })
}

/// Serves this process's metrics at `/metrics` (see [`metrics`]), until
/// the node stops.
async fn spawn_metrics(node: &mut Node, config: &Config) -> Result<(), NodeError> {
    let Some(addr) = config.metrics_listen else {
        return Ok(());
    };
    let listener = bind(addr).await?;
    let bound = local_addr(&listener, addr)?;
    node.metrics_addr = Some(bound);
    let app = metrics::router(metrics::Access::of(config, bound.ip()));
    let stop = node.stop.clone();
    node.tasks.spawn(async move {
        let serve = axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned());
        if let Err(error) = serve.await {
            tracing::error!(%error, "the metrics server stopped");
        }
    });
    Ok(())
}

fn spawn_server(node: &mut Node, listener: TcpListener, roles: Roles) {
    let stop = node.stop.clone();
    node.tasks.spawn(async move {
        if let Err(error) = waft_api::serve(listener, roles, stop.clone().cancelled_owned()).await {
            tracing::error!(%error, "the gRPC server stopped");
            stop.cancel();
        }
    });
}

/// The Frontend's signals across processes: Postgres notifications.
struct PostgresDue(PostgresStore);

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
async fn relay_lambdas(store: PostgresStore, frontend: Arc<Frontend>) {
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
async fn relay_due(store: PostgresStore, wake: Wake) {
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
