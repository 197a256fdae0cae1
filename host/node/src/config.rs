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
use waft_services::{
    ConsumerConfig, ControllerConfig, ExecutorConfig, HeartbeatConfig, RetentionConfig,
};

use waft_telemetry::OtelConfig;

use crate::backends::{QueueSection, one_process_store, sqlite_path};

mod exposure;
mod keys;

use keys::{Key, env_name, keys};

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
    /// How long ended tasks are kept; the consumers' pruner applies it.
    pub retention: RetentionConfig,
    pub controller: ControllerConfig,
    pub executor: ExecutorConfig,
    pub runtime: RuntimeSection,
    pub auth: AuthSection,
    pub tls: TlsSection,
    pub secrets: SecretsSection,
    /// Traces over OTLP; off unless an endpoint is set.
    pub otel: OtelConfig,
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
            retention: RetentionConfig::default(),
            controller: ControllerConfig::default(),
            executor: ExecutorConfig::default(),
            runtime: RuntimeSection::default(),
            auth: AuthSection::default(),
            tls: TlsSection::default(),
            secrets: SecretsSection::default(),
            otel: OtelConfig::default(),
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
            Some(key) => write!(f, "{key} ({}): {}", env_name(key), self.reason),
            None => f.write_str(&self.reason),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Keys that moved, old spelling first. The old one is still read, in the
/// file and as its variable, with a warning that names the new one.
const MOVED: &[(&str, &str)] = &[
    ("queue.endpoint_url", "queue.sqs.endpoint_url"),
    ("queue.region", "queue.sqs.region"),
    ("queue.prefix", "queue.sqs.prefix"),
];

impl Config {
    /// Reads `file` (TOML; none: defaults only), then applies the `WAFT_*`
    /// variables among `env`, and OpenTelemetry's standard ones where the
    /// `otel` section left a gap. A key spelled the old way is read, and a
    /// warning names its new spelling.
    pub fn load(
        file: Option<&str>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let (config, moved) = Self::load_noting_moved(file, env)?;
        for note in moved {
            tracing::warn!("{note}");
        }
        Ok(config)
    }

    /// [`Config::load`], and the warnings about keys spelled the old way.
    fn load_noting_moved(
        file: Option<&str>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<(Self, Vec<String>), ConfigError> {
        let mut table: toml::Table = match file {
            Some(text) => text
                .parse()
                .map_err(|e| ConfigError::whole(format!("invalid configuration file: {e}")))?,
            None => toml::Table::new(),
        };
        let env: Vec<(String, String)> = env.into_iter().collect();
        let mut notes = move_old_keys(&mut table)?;
        notes.extend(apply_env(&mut table, env.iter().cloned())?);
        let mut config: Self =
            toml::Value::Table(table)
                .try_into()
                .map_err(|e: toml::de::Error| {
                    ConfigError::whole(format!("invalid configuration: {e}"))
                })?;
        config.otel.apply_standard_env(&env);
        Ok((config, notes))
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
        if let (Some(Role::Consumer | Role::Controller), Some(kind)) = (role, self.queue.kind)
            && !kind.shared_between_processes()
        {
            return Err(ConfigError::new(
                "queue.kind",
                format!(
                    "{} queues live in one process (waft dev); waft serve needs sqs",
                    kind.as_str()
                ),
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
        self.retention
            .validate()
            .map_err(|e| ConfigError::new("retention", e))?;
        self.otel
            .validate()
            .map_err(|e| ConfigError::new("otel", e))?;
        self.validate_consumer()
    }

    /// The consumer's settings, and its enqueue timeout against the queue's
    /// visibility timeout.
    fn validate_consumer(&self) -> Result<(), ConfigError> {
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
        if consumer.enqueue_timeout <= self.queue.visibility_timeout {
            return Err(ConfigError::new(
                "consumer.enqueue_timeout",
                format!(
                    "{:?} must exceed the queue's visibility_timeout ({:?}): a message a \
                     controller received but did not claim must become visible again before \
                     the store enqueues its task anew",
                    consumer.enqueue_timeout, self.queue.visibility_timeout
                ),
            ));
        }
        Ok(())
    }
}

/// Every key the file and the environment may set.
fn known_keys() -> Vec<Key> {
    keys::<Config>()
}

/// Sets the keys `env` names (`WAFT_<SECTION>_<KEY>`, any case after the
/// prefix; an old spelling before the new, so the new one wins).
fn apply_env(
    table: &mut toml::Table,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Vec<String>, ConfigError> {
    let keys = known_keys();
    let find = |name: &str| keys.iter().find(|key| key.env_name() == name);
    let mut settings = Vec::new();
    let mut notes = Vec::new();
    for (name, value) in env {
        let Some(rest) = name.strip_prefix("WAFT_") else {
            continue;
        };
        let name = format!("WAFT_{}", rest.to_ascii_uppercase());
        if let Some(key) = find(&name) {
            settings.push((1, key, value));
        } else if let Some((old, new)) = MOVED.iter().find(|(old, _)| env_name(old) == name) {
            notes.push(moved_note(old, new));
            let key = find(&env_name(new)).expect("a key moves to a key");
            settings.push((0, key, value));
        }
    }
    settings.sort_by_key(|(order, _, _)| *order);
    for (_, key, value) in settings {
        let value = env_value(key.list, &value);
        insert(table, &key.path, value)?;
    }
    Ok(notes)
}

/// Moves the file's keys spelled the old way to their new place.
fn move_old_keys(table: &mut toml::Table) -> Result<Vec<String>, ConfigError> {
    let mut notes = Vec::new();
    for (old, new) in MOVED {
        let old_path: Vec<&str> = old.split('.').collect();
        let Some(value) = remove(table, &old_path) else {
            continue;
        };
        let new_path: Vec<&str> = new.split('.').collect();
        if get(table, &new_path).is_some() {
            return Err(ConfigError::new(
                *old,
                format!("is the old spelling of {new}, which is set too: keep {new} alone"),
            ));
        }
        insert(table, &new_path, value)?;
        notes.push(moved_note(old, new));
    }
    Ok(notes)
}

fn moved_note(old: &str, new: &str) -> String {
    format!(
        "{old} ({}) is deprecated: write {new} ({}); the old spelling will stop working",
        env_name(old),
        env_name(new)
    )
}

fn get<'t>(table: &'t toml::Table, path: &[&str]) -> Option<&'t toml::Value> {
    let (last, sections) = path.split_last()?;
    let mut table = table;
    for section in sections {
        table = table.get(*section)?.as_table()?;
    }
    table.get(*last)
}

fn remove(table: &mut toml::Table, path: &[&str]) -> Option<toml::Value> {
    let (last, sections) = path.split_last()?;
    let mut table = table;
    for section in sections {
        table = table.get_mut(*section)?.as_table_mut()?;
    }
    table.remove(*last)
}

/// Sets `path` to `value`, making the sections on the way.
fn insert(table: &mut toml::Table, path: &[&str], value: toml::Value) -> Result<(), ConfigError> {
    let (last, sections) = path.split_last().expect("a key has a name");
    let mut table = table;
    for (depth, section) in sections.iter().enumerate() {
        let entry = table
            .entry((*section).to_owned())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let toml::Value::Table(inner) = entry else {
            return Err(ConfigError::new(
                sections[..=depth].join("."),
                "must be a table",
            ));
        };
        table = inner;
    }
    table.insert((*last).to_owned(), value);
    Ok(())
}

/// An environment value as TOML: a list's comma-separated, numbers as
/// integers, `true`/`false` as booleans, the rest as strings.
fn env_value(list: bool, value: &str) -> toml::Value {
    if list {
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
