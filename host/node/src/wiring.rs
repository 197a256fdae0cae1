//! One wiring for every process. `waft dev` is every role in one process
//! on the embedded backends; `waft serve ROLE` is one role on backends that
//! processes share, reaching the roles that run elsewhere through gRPC
//! clients that implement the same traits. Each role is built in one place
//! from what runs beside it; what tells the two apart is [`Mode`], asked
//! once per difference: where the store and the data live, which queue
//! kind is the default, and whether other processes must hear of due tasks,
//! deploys and filled queues.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use waft_api::WaftChannel;
use waft_api::{AllowedHosts, ChannelOptions, ControllerClient, FrontendClient, HscClient, Roles};
use waft_queue::TaskQueue;
use waft_runtime::{Allocator, Runtime, RuntimeConfig};
use waft_services::auth::Authenticator;
use waft_services::secrets::SecretKey;
use waft_services::{
    Clock, Controller, ControllerApi, DueSignal, Executor, ExecutorConfig, FillSignal, Fills,
    Frontend, FrontendApi, Hsc, HscApi, Pruner, StoreClock, StoreConsumer, SystemClock, Wake,
};
use waft_store::{PostgresStore, SqliteStore, TaskStore};

use crate::backends::{QueueKind, StoreBackend, open_queues};
use crate::data_dir;
use crate::listen::{self, identity, read_pem};
use crate::notify::{PostgresDue, PostgresFills, relay_due, relay_fills, relay_lambdas};
use crate::{Config, ConfigError, Node, NodeError, Role};

/// Which roles a process runs, and on what.
#[derive(Debug, Clone)]
pub(crate) enum Mode {
    /// Every role; the SQLite file, the compiled-component cache and the
    /// secrets key default to files in `data_dir`.
    Dev { data_dir: PathBuf },
    /// One role, on a store and queues other processes share.
    Serve(Role),
}

impl Mode {
    fn runs(&self, role: Role) -> bool {
        match self {
            Mode::Dev { .. } => true,
            Mode::Serve(one) => *one == role,
        }
    }

    fn role(&self) -> Option<Role> {
        match self {
            Mode::Dev { .. } => None,
            Mode::Serve(role) => Some(*role),
        }
    }

    /// `name` in `waft dev`'s data directory, a default where the
    /// configuration names no file; `waft serve` has no such defaults.
    fn data_file(&self, name: &str) -> Option<PathBuf> {
        match self {
            Mode::Dev { data_dir } => Some(data_dir.join(name)),
            Mode::Serve(_) => None,
        }
    }

    fn default_queue(&self) -> QueueKind {
        match self {
            Mode::Dev { .. } => QueueKind::Memory,
            Mode::Serve(_) => QueueKind::Sqs,
        }
    }
}

/// The store as the roles of a process share it.
struct Stored {
    store: Arc<dyn TaskStore>,
    clock: Arc<dyn Clock>,
    /// The Postgres that carries signals to the other processes of
    /// `waft serve`; `None` in `waft dev`, where the roles call each other.
    across_processes: Option<PostgresStore>,
}

/// The roles that run in this process, as the server and the other roles
/// take them.
#[derive(Default)]
struct Local {
    frontend: Option<Arc<Frontend>>,
    hsc: Option<Arc<Hsc>>,
    controller: Option<Controller>,
}

/// Validates `config`, builds the roles `mode` runs and puts them on the
/// network.
pub(crate) async fn start(mode: &Mode, config: &Config) -> Result<Node, NodeError> {
    config.validate(mode.role())?;
    let data_dir = match mode {
        Mode::Dev { data_dir } => Some(data_dir::hold(data_dir)?),
        Mode::Serve(_) => None,
    };
    let mut node = Node {
        addr: config.listen,
        metrics_addr: None,
        stop: CancellationToken::new(),
        tasks: JoinSet::new(),
        _data_dir: data_dir,
    };
    let stored = open_store(mode, config, &node.stop).await?;
    let queue = match mode.runs(Role::Consumer) || mode.runs(Role::Controller) {
        true => Some(open_queues(&config.queue, mode.default_queue()).await),
        false => None,
    };
    let runtime = runtime(mode, config)?;
    let secret_key = secret_key(mode, config)?;
    // The queues the consumer fills, as the Frontend tells its Controllers.
    let fills = Fills::default();
    let wake = spawn_consumer(
        mode,
        config,
        stored.as_ref(),
        queue.clone(),
        &fills,
        &mut node.tasks,
        &node.stop,
    );
    let frontend = frontend(
        mode,
        config,
        stored.as_ref(),
        runtime.clone(),
        secret_key.clone(),
        wake,
        fills,
        &mut node,
    );
    let hsc = stored
        .as_ref()
        .filter(|_| mode.runs(Role::Hsc))
        .map(|s| Arc::new(Hsc::new(s.store.clone(), s.clock.clone(), config.heartbeat)));
    if let Some(hsc) = &hsc {
        // The task history's counts go to the store every few seconds, and
        // once more at the stop.
        let stop = node.stop.clone();
        node.tasks.spawn(
            hsc.history()
                .run(waft_services::history::FLUSH_INTERVAL, stop),
        );
    }
    let mut local = Local {
        frontend,
        hsc,
        ..Local::default()
    };
    local.controller = spawn_controller(mode, config, queue, &local, &mut node)?;
    spawn_executor(mode, config, runtime, secret_key, &local, &mut node)?;
    let roles = Roles {
        auth: authenticator(mode, config, stored.map(|s| s.store)),
        frontend: local.frontend,
        controller: local
            .controller
            .map(|c| Arc::new(c) as Arc<dyn ControllerApi>),
        hsc: local.hsc.map(|h| h as Arc<dyn HscApi>),
        tls: identity(config)?,
        allowed_hosts: AllowedHosts::new(config.answered_hosts()),
    };
    listen::serve(&mut node, config, roles).await?;
    Ok(node)
}

/// The store, when a role here keeps state in it (Frontend, HSC,
/// consumer): `waft dev`'s SQLite file unless `store.url` names another,
/// `waft serve`'s Postgres.
async fn open_store(
    mode: &Mode,
    config: &Config,
    stop: &CancellationToken,
) -> Result<Option<Stored>, NodeError> {
    if ![Role::Frontend, Role::Hsc, Role::Consumer]
        .into_iter()
        .any(|r| mode.runs(r))
    {
        return Ok(None);
    }
    let url = config.store.url.as_deref();
    let max_connections = config.store.max_connections;
    let (store, across_processes) = match (mode, url) {
        (Mode::Dev { .. }, Some(url)) => (
            StoreBackend::open(url, max_connections).await?.shared(),
            None,
        ),
        (Mode::Dev { data_dir }, None) => {
            let sqlite = SqliteStore::open(&data_dir.join("waft.db")).await?;
            // This process holds the directory alone: what the store says
            // is in flight was carried by one that is gone (data_dir.rs).
            let now = SystemClock.now();
            let recovered = sqlite.task_recover(now).await?;
            if recovered > 0 {
                tracing::info!(
                    recovered,
                    "tasks in flight when this data directory's last process stopped are due again"
                );
            }
            (StoreBackend::Sqlite(sqlite).shared(), None)
        }
        (Mode::Serve(role), url) => {
            let url = url.ok_or_else(|| ConfigError::new("store.url", "required"))?;
            let postgres = StoreBackend::open(url, max_connections)
                .await?
                .into_shared_between_processes(*role)?;
            (
                Arc::new(postgres.clone()) as Arc<dyn TaskStore>,
                Some(postgres),
            )
        }
    };
    let clock: Arc<dyn Clock> = StoreClock::start(store.clone(), stop.clone()).await?;
    Ok(Some(Stored {
        store,
        clock,
        across_processes,
    }))
}

/// The WebAssembly runtime, when the Frontend (for its deploy checks) or
/// an executor runs here. An executor's pools one instance slot per task
/// at once and room for deploy checks; a Frontend alone instantiates on
/// demand, each check under the lambda's own limits and the store limiter,
/// so a check costs no more than one execution would.
fn runtime(mode: &Mode, config: &Config) -> Result<Option<Arc<Runtime>>, NodeError> {
    let cache_dir = config
        .runtime
        .cache_dir
        .clone()
        .or_else(|| mode.data_file("cache"));
    let runtime = if mode.runs(Role::Executor) {
        RuntimeConfig {
            cache_dir,
            outbound_ca: config.runtime.outbound_ca.clone(),
            max_instances: u32::try_from(config.executor.max_tasks)
                .unwrap_or(u32::MAX)
                .saturating_add(16),
            ..RuntimeConfig::default()
        }
    } else if mode.runs(Role::Frontend) {
        RuntimeConfig {
            allocator: Allocator::OnDemand,
            cache_dir,
            ..RuntimeConfig::default()
        }
    } else {
        return Ok(None);
    };
    Ok(Some(Arc::new(Runtime::new(runtime)?)))
}

/// The key that seals secrets, when the Frontend or an executor runs here:
/// the file `secrets.key_file` names, or `waft dev`'s own, made when
/// absent; `waft serve` without the key runs without secrets.
fn secret_key(mode: &Mode, config: &Config) -> Result<Option<Arc<SecretKey>>, ConfigError> {
    if !mode.runs(Role::Frontend) && !mode.runs(Role::Executor) {
        return Ok(None);
    }
    let configured = config.secrets.key_file.as_deref();
    let key = match (configured, mode.data_file("secrets.key")) {
        (Some(path), Some(_)) => SecretKey::read_or_create(path),
        (None, Some(default)) => SecretKey::read_or_create(&default),
        (Some(path), None) => SecretKey::read(path),
        (None, None) => return Ok(None),
    };
    key.map(|key| Some(Arc::new(key)))
        .map_err(|e| ConfigError::new("secrets.key_file", e.to_string()))
}

/// Starts the Store Consumer, and its pruner, when it runs here; its wake
/// is what the Frontend's signals reach. It tells the queues it fills to
/// the Frontend beside it (`fills`), or through Postgres to the Frontends
/// elsewhere.
fn spawn_consumer(
    mode: &Mode,
    config: &Config,
    stored: Option<&Stored>,
    queue: Option<Arc<dyn TaskQueue>>,
    fills: &Fills,
    tasks: &mut JoinSet<()>,
    stop: &CancellationToken,
) -> Option<Wake> {
    let (Some(stored), Some(queue)) = (stored.filter(|_| mode.runs(Role::Consumer)), queue) else {
        return None;
    };
    let consumer = StoreConsumer::new(
        stored.store.clone(),
        queue.clone(),
        stored.clock.clone(),
        config.consumer.clone(),
    );
    let pruner = Pruner::new(
        stored.store.clone(),
        stored.clock.clone(),
        config.retention.clone(),
    )
    .with_queue(queue);
    let stopped = stop.clone();
    tasks.spawn(async move { pruner.run(stopped).await });
    let signal: Arc<dyn FillSignal> = match &stored.across_processes {
        Some(postgres) => Arc::new(PostgresFills(postgres.clone())),
        None => Arc::new(fills.clone()),
    };
    let consumer = consumer.fills(signal);
    let wake = consumer.waker();
    let stopped = stop.clone();
    tasks.spawn(async move { consumer.run(stopped.cancelled_owned()).await });
    if let Some(postgres) = stored.across_processes.clone() {
        let (stop, wake) = (stop.clone(), wake.clone());
        tasks.spawn(async move {
            tokio::select! {
                () = stop.cancelled() => {}
                () = relay_due(postgres, wake) => {}
            }
        });
    }
    Some(wake)
}

/// The Frontend, when it runs here. Its signals of due tasks go to the
/// consumer beside it, or through Postgres to the consumers elsewhere, and
/// it hears of the other Frontends' deploys and the consumers' fills the
/// same way.
#[allow(
    clippy::too_many_arguments,
    reason = "each is one thing the Frontend is built from"
)]
fn frontend(
    mode: &Mode,
    config: &Config,
    stored: Option<&Stored>,
    runtime: Option<Arc<Runtime>>,
    secret_key: Option<Arc<SecretKey>>,
    wake: Option<Wake>,
    fills: Fills,
    node: &mut Node,
) -> Option<Arc<Frontend>> {
    let (Some(stored), Some(runtime)) = (stored.filter(|_| mode.runs(Role::Frontend)), runtime)
    else {
        return None;
    };
    let due: Arc<dyn DueSignal> = match (wake, &stored.across_processes) {
        (Some(wake), _) => Arc::new(wake),
        (None, Some(postgres)) => Arc::new(PostgresDue(postgres.clone())),
        // No consumer anywhere to tell: due tasks wait for a poll.
        (None, None) => Arc::new(Wake::default()),
    };
    let frontend = Frontend::new(stored.store.clone(), stored.clock.clone(), runtime, due)
        .keep_versions(config.store.keep_versions)
        .fills(fills.clone());
    let frontend = Arc::new(match secret_key {
        Some(key) => frontend.secrets(key),
        None => frontend,
    });
    if let Some(postgres) = stored.across_processes.clone() {
        let stop = node.stop.clone();
        let relayed = frontend.clone();
        node.tasks.spawn(async move {
            tokio::select! {
                () = stop.cancelled() => {}
                () = relay_lambdas(postgres, relayed) => {}
            }
        });
        let (stop, postgres) = (node.stop.clone(), stored.across_processes.clone());
        if let Some(postgres) = postgres {
            node.tasks.spawn(async move {
                tokio::select! {
                    () = stop.cancelled() => {}
                    () = relay_fills(postgres, fills) => {}
                }
            });
        }
    }
    Some(frontend)
}

/// The Controller, polling its queues, when it runs here.
fn spawn_controller(
    mode: &Mode,
    config: &Config,
    queue: Option<Arc<dyn TaskQueue>>,
    local: &Local,
    node: &mut Node,
) -> Result<Option<Controller>, NodeError> {
    let Some(queue) = queue.filter(|_| mode.runs(Role::Controller)) else {
        return Ok(None);
    };
    let controller = Controller::new(
        queue,
        hsc_of(config, local)?,
        frontend_of(config, local)?,
        config.controller.clone(),
    );
    let stop = node.stop.clone();
    let polling = controller.clone();
    node.tasks
        .spawn(async move { polling.run(stop.cancelled_owned()).await });
    Ok(Some(controller))
}

/// The Executor, running tasks, when it runs here.
fn spawn_executor(
    mode: &Mode,
    config: &Config,
    runtime: Option<Arc<Runtime>>,
    secret_key: Option<Arc<SecretKey>>,
    local: &Local,
    node: &mut Node,
) -> Result<(), NodeError> {
    let Some(runtime) = runtime.filter(|_| mode.runs(Role::Executor)) else {
        return Ok(());
    };
    let controller: Arc<dyn ControllerApi> = match &local.controller {
        Some(controller) => Arc::new(controller.clone()),
        None => Arc::new(ControllerClient::new(peer(
            config,
            &config.peers.controller,
        )?)),
    };
    let executor = Executor::new(
        runtime,
        controller,
        hsc_of(config, local)?,
        frontend_of(config, local)?,
        ExecutorConfig {
            heartbeat: config.heartbeat,
            ..config.executor.clone()
        },
        secret_key,
    )
    .map_err(|e| ConfigError::new("executor.journal", e.to_string()))?;
    let stop = node.stop.clone();
    node.tasks.spawn(executor.run(stop.cancelled_owned()));
    Ok(())
}

/// The Frontend as another role calls it: beside it, or over gRPC.
fn frontend_of(config: &Config, local: &Local) -> Result<Arc<dyn FrontendApi>, NodeError> {
    Ok(match &local.frontend {
        Some(frontend) => frontend.clone(),
        None => Arc::new(FrontendClient::new(peer(config, &config.peers.frontend)?)),
    })
}

/// The HSC as another role calls it: beside it, or over gRPC.
fn hsc_of(config: &Config, local: &Local) -> Result<Arc<dyn HscApi>, NodeError> {
    Ok(match &local.hsc {
        Some(hsc) => hsc.clone(),
        None => Arc::new(HscClient::new(peer(config, &config.peers.hsc)?)),
    })
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

/// The authenticator of this process's server: `None` when auth is off or
/// no role here answers calls. Roles without the store accept only the
/// cluster token.
fn authenticator(
    mode: &Mode,
    config: &Config,
    store: Option<Arc<dyn TaskStore>>,
) -> Option<Arc<Authenticator>> {
    let answers_calls = [Role::Frontend, Role::Hsc, Role::Controller]
        .into_iter()
        .any(|role| mode.runs(role));
    if !config.auth.enabled || !answers_calls {
        return None;
    }
    Some(Arc::new(Authenticator::new(
        store,
        config.auth.cluster_token.as_deref(),
    )))
}

#[cfg(test)]
mod tests {
    use waft_services::ClientApi;

    use super::*;

    /// `waft dev` runs every role: the Frontend answers over gRPC, and its
    /// defaults land in the data directory.
    #[tokio::test]
    async fn dev_runs_every_role_on_its_data_directory() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            listen: "127.0.0.1:0".parse().unwrap(),
            ..Config::default()
        };
        let node = crate::start_dev(crate::DevOptions {
            data_dir: dir.path().to_owned(),
            config,
        })
        .await
        .unwrap();
        assert_ne!(node.addr.port(), 0);
        for file in ["waft.db", "secrets.key", "cache"] {
            assert!(dir.path().join(file).exists(), "{file}");
        }
        let frontend = FrontendClient::new(waft_api::channel(&node.addr.to_string()).unwrap());
        assert!(frontend.lambda_list().await.unwrap().is_empty());
        node.shutdown().await;
    }

    /// One role of `waft serve` runs that role alone, with no defaults in a
    /// data directory; only roles that answer calls check tokens.
    #[test]
    fn serve_runs_its_role_alone() {
        let mode = Mode::Serve(Role::Executor);
        assert!(mode.runs(Role::Executor));
        assert!(!mode.runs(Role::Frontend));
        assert_eq!(mode.data_file("cache"), None);
        assert_eq!(mode.default_queue(), QueueKind::Sqs);
        let mut config = Config::default();
        config.auth.enabled = true;
        config.auth.cluster_token = Some("c".repeat(32));
        assert!(
            authenticator(&mode, &config, None).is_none(),
            "answers no call"
        );
        let controller = Mode::Serve(Role::Controller);
        assert!(authenticator(&controller, &config, None).is_some());
    }
}
