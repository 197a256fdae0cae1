//! The configuration of a Waft process: one typed struct, read from a TOML
//! file and `WAFT_*` environment variables, validated before anything
//! starts.
//!
//! Every key has a default, so an empty file is a valid configuration for
//! the roles that need no address. An environment variable overrides the
//! key it names: `WAFT_<SECTION>_<KEY>` (`WAFT_HEARTBEAT_INTERVAL=2s`,
//! `WAFT_STORE_URL=postgres://…`), or `WAFT_LISTEN` for the top-level key.
//! Unknown keys in the file are errors: a typo must not silently fall back
//! to a default.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;
use waft_queue::SqsConfig;
use waft_services::{ConsumerConfig, ControllerConfig, ExecutorConfig, HeartbeatConfig};

use crate::backends::{QueueKind, one_process_store, sqlite_path};

mod exposure;

/// One role of the distributed mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Frontend,
    Consumer,
    Controller,
    Executor,
    Hsc,
}

impl Role {
    /// The role's name on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Frontend => "frontend",
            Role::Consumer => "consumer",
            Role::Controller => "controller",
            Role::Executor => "executor",
            Role::Hsc => "hsc",
        }
    }
}

/// Everything a Waft process may be configured with.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Where the gRPC server listens (default `127.0.0.1:7070`; port 0
    /// picks a free one).
    pub listen: SocketAddr,
    /// Where Prometheus scrapes `/metrics` over HTTP; no metrics server
    /// when absent.
    pub metrics_listen: Option<SocketAddr>,
    /// Host names the servers answer to besides their addresses, the
    /// names in `peers` and `localhost` on loopback; see
    /// [`Config::answered_hosts`].
    pub allowed_hosts: Vec<String>,
    pub store: StoreSection,
    pub queue: QueueSection,
    pub peers: PeersSection,
    /// Heartbeat timing: the HSC's and the executors' must agree.
    pub heartbeat: HeartbeatConfig,
    pub consumer: ConsumerConfig,
    pub controller: ControllerConfig,
    pub executor: ExecutorConfig,
    pub runtime: RuntimeSection,
    pub auth: AuthSection,
    pub tls: TlsSection,
    pub secrets: SecretsSection,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 7070)),
            metrics_listen: None,
            allowed_hosts: Vec::new(),
            store: StoreSection::default(),
            queue: QueueSection::default(),
            peers: PeersSection::default(),
            heartbeat: HeartbeatConfig::default(),
            consumer: ConsumerConfig::default(),
            controller: ControllerConfig::default(),
            executor: ExecutorConfig::default(),
            runtime: RuntimeSection::default(),
            auth: AuthSection::default(),
            tls: TlsSection::default(),
            secrets: SecretsSection::default(),
        }
    }
}

/// The task store.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreSection {
    /// `postgres://user@host/db` (required by frontend, consumer and hsc),
    /// or `sqlite:PATH` for `waft dev` (whose default is a SQLite file in
    /// its data directory).
    pub url: Option<String>,
    /// Connections in the pool (default 16).
    pub max_connections: u32,
    /// Versions of each lambda kept after a deploy or rollback, the current
    /// one included (default 10, at least 1); older ones and components no
    /// version uses are deleted, except versions pinned by unfinished tasks.
    pub keep_versions: u32,
}

impl Default for StoreSection {
    fn default() -> Self {
        Self {
            url: None,
            max_connections: 16,
            keep_versions: 10,
        }
    }
}

/// The queues: their kind, and the settings of SQS beside it
/// (`visibility_timeout` applies to both kinds).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueueSection {
    /// `memory` or `sqs`; `waft dev` defaults to `memory`, `waft serve`
    /// takes `sqs` only.
    pub kind: Option<QueueKind>,
    /// `endpoint_url` (AWS itself when absent), `region` (default
    /// `us-east-1`), `prefix` of queue names (default `waft`), and
    /// `visibility_timeout`: a received message comes back after it unless
    /// acknowledged (default 30s).
    pub sqs: SqsConfig,
}

/// One table, `kind` and the SQS keys side by side, as the reference and
/// the `WAFT_QUEUE_*` variables name them.
impl<'de> Deserialize<'de> for QueueSection {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut table = toml::Table::deserialize(deserializer)?;
        let kind = table
            .remove("kind")
            .map(QueueKind::deserialize)
            .transpose()
            .map_err(D::Error::custom)?;
        let sqs = SqsConfig::deserialize(toml::Value::Table(table)).map_err(D::Error::custom)?;
        Ok(Self { kind, sqs })
    }
}

/// Where the other roles listen (`host:port`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PeersSection {
    /// Needed by controller and executor.
    pub frontend: Option<String>,
    /// Needed by executor.
    pub controller: Option<String>,
    /// Needed by controller and executor.
    pub hsc: Option<String>,
}

/// The WebAssembly runtime (executors, and the Frontend's deploy checks).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeSection {
    /// Compiled components are cached here across restarts.
    pub cache_dir: Option<PathBuf>,
    /// A CA certificate file (PEM) that lambdas' outbound HTTPS trusts
    /// besides the system's roots.
    pub outbound_ca: Option<PathBuf>,
}

/// The key that seals lambdas' secrets: the Frontend seals with it,
/// executors open with it; the same file on every such process.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SecretsSection {
    /// 64 hex digits (32 random bytes), readable by the Waft processes
    /// only. `waft dev` makes `DATA_DIR/secrets.key` when absent.
    pub key_file: Option<PathBuf>,
}

/// Who may call. Every process of an installation needs the same settings.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthSection {
    /// Calls need a token (default false).
    pub enabled: bool,
    /// The secret the processes call each other with; it has every right.
    /// At least 32 characters; required when auth is on.
    pub cluster_token: Option<String>,
    /// The bearer token `/metrics` asks for; required when
    /// `metrics_listen` is not a loopback address.
    pub metrics_token: Option<String>,
}

/// TLS for gRPC (rustls). Every process of an installation needs the same
/// settings.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsSection {
    /// This process's certificate chain (PEM): its server speaks TLS.
    pub cert: Option<PathBuf>,
    /// The certificate's private key (PEM); with `cert`.
    pub key: Option<PathBuf>,
    /// Certificates (PEM) to verify peers with: calls to other roles go
    /// over TLS.
    pub ca: Option<PathBuf>,
}

/// The shortest cluster token accepted.
const MIN_CLUSTER_TOKEN: usize = 32;

/// A configuration that cannot run: the key at fault, when one is, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// `section.key` as in the file (`WAFT_SECTION_KEY` in the environment).
    pub key: Option<String>,
    pub reason: String,
}

impl ConfigError {
    /// `key` is wrong for `reason`.
    pub fn new(key: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            key: Some(key.into()),
            reason: reason.into(),
        }
    }

    /// The whole configuration is wrong (its reason names the place).
    fn whole(reason: impl Into<String>) -> Self {
        Self {
            key: None,
            reason: reason.into(),
        }
    }
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.key {
            Some(key) => write!(
                f,
                "{key} (WAFT_{}): {}",
                key.replace('.', "_").to_ascii_uppercase(),
                self.reason
            ),
            None => f.write_str(&self.reason),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Keys an environment variable may set: `WAFT_<SECTION>_<KEY>`.
const ENV_KEYS: &[(&str, &[&str])] = &[
    ("", &["listen", "metrics_listen", "allowed_hosts"]),
    ("store", &["url", "max_connections", "keep_versions"]),
    (
        "queue",
        &[
            "kind",
            "endpoint_url",
            "region",
            "prefix",
            "visibility_timeout",
        ],
    ),
    ("peers", &["frontend", "controller", "hsc"]),
    ("heartbeat", &["interval", "rpc_timeout", "timeout"]),
    ("consumer", &["poll_interval", "batch", "enqueue_timeout"]),
    (
        "controller",
        &["lambdas", "buffer", "receive_wait", "refresh"],
    ),
    (
        "executor",
        &[
            "lambdas",
            "max_tasks",
            "next_work_wait",
            "refresh",
            "shutdown_grace",
            "journal",
            "loaded_versions",
            "max_children",
        ],
    ),
    ("runtime", &["cache_dir", "outbound_ca"]),
    ("auth", &["enabled", "cluster_token", "metrics_token"]),
    ("tls", &["cert", "key", "ca"]),
    ("secrets", &["key_file"]),
];

impl Config {
    /// Reads `file` (TOML; none: defaults only), then applies the `WAFT_*`
    /// variables among `env`.
    pub fn load(
        file: Option<&str>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let mut table: toml::Table = match file {
            Some(text) => text
                .parse()
                .map_err(|e| ConfigError::whole(format!("invalid configuration file: {e}")))?,
            None => toml::Table::new(),
        };
        for (name, value) in env {
            let Some(rest) = name.strip_prefix("WAFT_") else {
                continue;
            };
            let rest = rest.to_ascii_lowercase();
            for (section, keys) in ENV_KEYS {
                for key in *keys {
                    let matches = if section.is_empty() {
                        rest == *key
                    } else {
                        rest == format!("{section}_{key}")
                    };
                    if !matches {
                        continue;
                    }
                    let value = env_value(key, &value);
                    if section.is_empty() {
                        table.insert((*key).to_owned(), value);
                    } else {
                        let entry = table
                            .entry((*section).to_owned())
                            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
                        let toml::Value::Table(section_table) = entry else {
                            return Err(ConfigError::new(*section, "must be a table"));
                        };
                        section_table.insert((*key).to_owned(), value);
                    }
                }
            }
        }
        toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::whole(format!("invalid configuration: {e}")))
    }

    /// Checks what `role` needs (`None`: every role in one process, as
    /// `waft dev` runs them).
    pub fn validate(&self, role: Option<Role>) -> Result<(), ConfigError> {
        let need = |field: &Option<String>, name: &str, role: Role| {
            field.as_ref().map(|_| ()).ok_or_else(|| {
                ConfigError::new(name, format!("the {} role needs it", role.as_str()))
            })
        };
        let heartbeat = self.heartbeat;
        match role {
            Some(role @ (Role::Frontend | Role::Hsc | Role::Consumer)) => {
                need(&self.store.url, "store.url", role)?;
                if self.store.url.as_deref().and_then(sqlite_path).is_some() {
                    return Err(one_process_store(role));
                }
            }
            Some(Role::Controller) => {
                need(&self.peers.frontend, "peers.frontend", Role::Controller)?;
                need(&self.peers.hsc, "peers.hsc", Role::Controller)?;
            }
            Some(Role::Executor) => {
                need(&self.peers.frontend, "peers.frontend", Role::Executor)?;
                need(&self.peers.controller, "peers.controller", Role::Executor)?;
                need(&self.peers.hsc, "peers.hsc", Role::Executor)?;
            }
            None => {}
        }
        if matches!(role, Some(Role::Consumer | Role::Controller))
            && self.queue.kind == Some(QueueKind::Memory)
        {
            return Err(ConfigError::new(
                "queue.kind",
                "memory queues live in one process (waft dev); waft serve needs sqs",
            ));
        }
        self.validate_exposure(role)?;
        if self.tls.cert.is_some() != self.tls.key.is_some() {
            return Err(ConfigError::new(
                if self.tls.cert.is_some() {
                    "tls.key"
                } else {
                    "tls.cert"
                },
                "tls.cert and tls.key go together: set both (or neither)",
            ));
        }
        heartbeat
            .validate()
            .map_err(|e| ConfigError::new("heartbeat", e.to_string()))?;
        self.controller
            .validate()
            .map_err(|e| ConfigError::new("controller", e))?;
        ExecutorConfig {
            heartbeat,
            ..self.executor.clone()
        }
        .validate()
        .map_err(|e| ConfigError::new("executor", e))?;
        let consumer = &self.consumer;
        if consumer.batch == 0 {
            return Err(ConfigError::new("consumer.batch", "must be above zero"));
        }
        if consumer.poll_interval.is_zero() {
            return Err(ConfigError::new(
                "consumer.poll_interval",
                "must be above zero",
            ));
        }
        if consumer.enqueue_timeout <= self.queue.sqs.visibility_timeout {
            return Err(ConfigError::new(
                "consumer.enqueue_timeout",
                format!(
                    "{:?} must exceed the queue's visibility_timeout ({:?}): a message a \
                     controller received but did not claim must become visible again before \
                     the store enqueues its task anew",
                    consumer.enqueue_timeout, self.queue.sqs.visibility_timeout
                ),
            ));
        }
        Ok(())
    }
}

/// An environment value as TOML: numbers as integers, `lambdas` and
/// `allowed_hosts` as comma-separated lists, the rest as strings.
fn env_value(key: &str, value: &str) -> toml::Value {
    if matches!(key, "lambdas" | "allowed_hosts") {
        return toml::Value::Array(
            value
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| toml::Value::String(s.to_owned()))
                .collect(),
        );
    }
    if let Ok(flag) = value.parse::<bool>() {
        return toml::Value::Boolean(flag);
    }
    match value.parse::<i64>() {
        Ok(number) => toml::Value::Integer(number),
        Err(_) => toml::Value::String(value.to_owned()),
    }
}

#[cfg(test)]
mod tests;
