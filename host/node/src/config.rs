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
    ("", &["listen", "metrics_listen"]),
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
        ],
    ),
    ("runtime", &["cache_dir", "outbound_ca"]),
    ("auth", &["enabled", "cluster_token"]),
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
        if self.auth.enabled {
            match &self.auth.cluster_token {
                Some(token) if token.len() >= MIN_CLUSTER_TOKEN => {}
                Some(_) => {
                    return Err(ConfigError::new(
                        "auth.cluster_token",
                        format!("must be at least {MIN_CLUSTER_TOKEN} characters"),
                    ));
                }
                None => {
                    return Err(ConfigError::new(
                        "auth.cluster_token",
                        "auth is enabled, so the cluster token is required",
                    ));
                }
            }
        } else if role.is_none() && !self.listen.ip().is_loopback() {
            return Err(ConfigError::new(
                "listen",
                format!(
                    "waft dev listens on {} without auth: enable auth (auth.enabled and \
                     auth.cluster_token) or listen on a loopback address",
                    self.listen
                ),
            ));
        }
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

/// An environment value as TOML: numbers as integers, `lambdas` as a
/// comma-separated list, the rest as strings.
fn env_value(key: &str, value: &str) -> toml::Value {
    if key == "lambdas" {
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
mod tests {
    use std::time::Duration;

    use super::*;

    /// `docs/configuration.md` cannot drift from the code: its keys are the
    /// keys the code reads, its environment names are theirs, and its
    /// defaults parse into the built-in defaults.
    #[test]
    fn the_reference_matches_the_code() {
        let reference = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/configuration.md"
        ));
        let rows: Vec<Vec<&str>> = reference
            .lines()
            .filter(|line| line.starts_with("| `"))
            .map(|line| line.split('|').map(str::trim).collect())
            .collect();
        let unquote = |cell: &str| cell.trim_matches('`').to_owned();
        let documented: Vec<String> = rows.iter().map(|row| unquote(row[1])).collect();
        let known: Vec<String> = ENV_KEYS
            .iter()
            .flat_map(|(section, keys)| {
                keys.iter().map(move |key| match *section {
                    "" => (*key).to_owned(),
                    section => format!("{section}.{key}"),
                })
            })
            .collect();
        let (mut documented, mut known) = (documented, known);
        documented.sort();
        known.sort();
        assert_eq!(documented, known, "documented keys vs keys the code reads");

        let mut toml = String::new();
        let mut sections: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for row in &rows {
            let key = unquote(row[1]);
            let env = format!("WAFT_{}", key.replace('.', "_").to_ascii_uppercase());
            assert_eq!(unquote(row[2]), env, "the environment name of {key}");
            let default = row[3];
            if default == "none" {
                continue;
            }
            let default = default.trim_matches('`');
            match key.split_once('.') {
                None => toml.push_str(&format!("{key} = {default}\n")),
                Some((section, field)) => {
                    let line = format!("{field} = {default}");
                    sections.entry(section.to_owned()).or_default().push(line);
                }
            }
        }
        for (section, lines) in sections {
            toml.push_str(&format!("[{section}]\n{}\n", lines.join("\n")));
        }
        let parsed: Config = toml::from_str(&toml).unwrap_or_else(|e| panic!("{e}\n{toml}"));
        assert_eq!(parsed, Config::default(), "documented defaults:\n{toml}");

        // The README's example file is a valid configuration too.
        let readme = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"));
        let example = readme
            .split("```toml\n")
            .nth(1)
            .and_then(|rest| rest.split("```").next())
            .expect("a TOML example in README.md");
        let example: Config = toml::from_str(example).unwrap_or_else(|e| panic!("README.md: {e}"));
        example.validate(None).unwrap();
    }

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn the_file_and_the_environment_combine_and_the_environment_wins() {
        let file = "listen = \"127.0.0.1:9000\"\n[heartbeat]\ninterval = \"1s\"\n[store]\nurl = \"postgres://file\"\n";
        let config = Config::load(
            Some(file),
            env(&[
                ("WAFT_STORE_URL", "postgres://env"),
                ("WAFT_CONSUMER_BATCH", "50"),
                ("WAFT_EXECUTOR_LAMBDAS", "hello, chain"),
                ("WAFT_LOG", "debug"),
            ]),
        )
        .unwrap();
        assert_eq!(config.listen.port(), 9000);
        assert_eq!(config.heartbeat.interval, Duration::from_secs(1));
        assert_eq!(config.store.url.as_deref(), Some("postgres://env"));
        assert_eq!(config.consumer.batch, 50);
        assert_eq!(config.executor.lambdas, vec!["hello", "chain"]);
        config.validate(Some(Role::Hsc)).unwrap();
    }

    #[test]
    fn auth_needs_a_long_cluster_token_and_dev_without_it_stays_on_loopback() {
        let load = |pairs: &[(&str, &str)]| Config::load(None, env(pairs)).unwrap();
        let missing = load(&[("WAFT_AUTH_ENABLED", "true")]);
        let error = missing.validate(None).unwrap_err();
        assert!(
            error.to_string().contains("WAFT_AUTH_CLUSTER_TOKEN"),
            "{error}"
        );
        let short = load(&[
            ("WAFT_AUTH_ENABLED", "true"),
            ("WAFT_AUTH_CLUSTER_TOKEN", "short"),
        ]);
        assert!(short.validate(None).unwrap_err().to_string().contains("32"));
        let open = load(&[("WAFT_LISTEN", "0.0.0.0:7070")]);
        assert!(
            open.validate(None)
                .unwrap_err()
                .to_string()
                .contains("loopback")
        );
        let token = "x".repeat(32);
        let guarded = load(&[
            ("WAFT_LISTEN", "0.0.0.0:7070"),
            ("WAFT_AUTH_ENABLED", "true"),
            ("WAFT_AUTH_CLUSTER_TOKEN", token.as_str()),
        ]);
        guarded.validate(None).unwrap();
    }

    #[test]
    fn typos_and_bad_values_are_refused_with_their_place() {
        let typo = Config::load(Some("[heartbeat]\nintervall = \"1s\"\n"), []).unwrap_err();
        assert!(typo.to_string().contains("intervall"), "{typo}");
        // `[queue]` is read in two parts, `kind` and the SQS settings.
        let typo = Config::load(Some("[queue]\nkind = \"sqs\"\nregoin = \"x\"\n"), []).unwrap_err();
        assert!(typo.to_string().contains("regoin"), "{typo}");
        let file = "[queue]\nkind = \"memory\"\nvisibility_timeout = \"7s\"\n[executor]\njournal = \"j\"\n";
        let config = Config::load(Some(file), env(&[("WAFT_QUEUE_PREFIX", "p")])).unwrap();
        assert_eq!(config.queue.kind, Some(QueueKind::Memory));
        assert_eq!(config.queue.sqs.visibility_timeout, Duration::from_secs(7));
        assert_eq!(config.queue.sqs.prefix, "p");
        assert_eq!(config.executor.journal, Some(PathBuf::from("j")));
        let bad = Config::load(None, env(&[("WAFT_HEARTBEAT_TIMEOUT", "soon")])).unwrap_err();
        assert!(bad.to_string().contains("soon"), "{bad}");
    }

    #[test]
    fn unsafe_heartbeats_and_missing_addresses_are_refused_before_start() {
        let config = Config::load(
            Some("[heartbeat]\ninterval = \"3s\"\nrpc_timeout = \"1s\"\ntimeout = \"10s\"\n"),
            [],
        )
        .unwrap();
        let error = config.validate(None).unwrap_err();
        assert!(
            error.to_string().contains("3 × heartbeat interval"),
            "{error}"
        );

        let error = Config::default()
            .validate(Some(Role::Executor))
            .unwrap_err();
        assert!(error.to_string().contains("WAFT_PEERS_FRONTEND"), "{error}");
        let error = Config::default()
            .validate(Some(Role::Frontend))
            .unwrap_err();
        assert!(error.to_string().contains("WAFT_STORE_URL"), "{error}");
        assert_eq!(error.key.as_deref(), Some("store.url"));
    }

    /// What several processes cannot share is refused for `waft serve`,
    /// naming its key; `waft dev` takes it.
    #[test]
    fn serve_refuses_backends_of_one_process() {
        let load = |pairs: &[(&str, &str)]| Config::load(None, env(pairs)).unwrap();
        let sqlite = load(&[("WAFT_STORE_URL", "sqlite:/tmp/waft.db")]);
        let error = sqlite.validate(Some(Role::Hsc)).unwrap_err();
        assert_eq!(error.key.as_deref(), Some("store.url"), "{error}");
        sqlite.validate(None).unwrap();
        let memory = load(&[
            ("WAFT_QUEUE_KIND", "memory"),
            ("WAFT_STORE_URL", "postgres://db"),
        ]);
        let error = memory.validate(Some(Role::Consumer)).unwrap_err();
        assert_eq!(error.key.as_deref(), Some("queue.kind"), "{error}");
        memory.validate(None).unwrap();
        let typo = Config::load(None, env(&[("WAFT_QUEUE_KIND", "kafka")])).unwrap_err();
        assert!(typo.to_string().contains("kafka"), "{typo}");
    }
}
