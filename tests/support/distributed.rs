//! The distributed installation: a `waft serve` process per role (two
//! consumers, as many executors as asked) on a fresh database of the test
//! PostgreSQL cluster and the test SQS server, with auth and TLS on; laid
//! out with proxies a test controls, or started on an earlier
//! installation's database, secrets key, token and binaries.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use tempfile::TempDir;
use waft_api::FrontendClient;

use super::ports::port;
use super::process::Process;
use super::settings::{KEEP_ENDED, fast_env};
use super::{Cluster, proxy};

/// How a distributed cluster is laid out.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    pub executors: usize,
    /// Executors reach the HSC through a [`proxy::Proxy`] the test controls.
    pub hsc_link: bool,
    /// The Controller reaches the queue service through a
    /// [`proxy::Proxy`] that counts its requests.
    pub sqs_link: bool,
    /// Settings every process gets beside (and over) the fast ones.
    pub env: &'static [(&'static str, &'static str)],
}

/// What a distributed cluster starts on.
#[derive(Debug, Clone)]
pub struct Preset {
    /// The store's database URL.
    pub database: String,
    /// The installation's secrets key file; a new one when `None`.
    pub secrets_key: Option<PathBuf>,
    /// The cluster token; a new one when `None`.
    pub token: Option<String>,
    /// The `waft` binary of a process (`executor1`, `controller`…), where
    /// it is not the one under test.
    pub programs: BTreeMap<String, PathBuf>,
    /// Keep every ended task (retention `forever`): an earlier
    /// installation's tasks ended long before the test runs.
    pub keep_ended: bool,
}

impl Preset {
    /// A fresh installation on `database`.
    pub fn fresh(database: String) -> Self {
        Self {
            database,
            secrets_key: None,
            token: None,
            programs: BTreeMap::new(),
            keep_ended: false,
        }
    }
}

impl Cluster {
    /// Every role its own `waft serve` process, with `executors`
    /// executors; `None` when Postgres or SQS is unavailable (never in CI).
    pub async fn distributed(executors: usize) -> Option<Self> {
        Self::distributed_with(Layout {
            executors,
            hsc_link: false,
            sqs_link: false,
            env: &[],
        })
        .await
    }

    /// A distributed cluster laid out as `layout` says.
    pub async fn distributed_with(layout: Layout) -> Option<Self> {
        let database = waft_testing::postgres()?.fresh_database().await;
        Self::distributed_on(layout, Preset::fresh(database)).await
    }

    /// A distributed cluster on what `preset` gives: a database, perhaps
    /// with an installation's tasks in it, and that installation's secrets
    /// key and cluster token.
    pub async fn distributed_on(layout: Layout, preset: Preset) -> Option<Self> {
        let Layout { executors, .. } = layout;
        let database = preset.database;
        let sqs = waft_testing::sqs()?;
        let dir = TempDir::new().unwrap();
        let addr = |_: &str| format!("127.0.0.1:{}", port());
        let (frontend, controller, hsc) = (addr("frontend"), addr("controller"), addr("hsc"));
        let prefix = format!("t{}x{}", std::process::id(), port());
        let token = preset.token.unwrap_or_else(waft_services::auth::new_secret);

        let tls = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
        let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        std::fs::write(&cert, tls.cert.pem()).unwrap();
        std::fs::write(&key, tls.signing_key.serialize_pem()).unwrap();
        let (cert_path, key_path) = (cert.display().to_string(), key.display().to_string());
        let secrets_key = dir.path().join("secrets.key");
        if let Some(key) = &preset.secrets_key {
            std::fs::copy(key, &secrets_key).unwrap();
        }
        let secrets_key_path = secrets_key.display().to_string();
        // The Frontend seals with it and the executors open with it.
        waft_services::secrets::SecretKey::read_or_create(&secrets_key).unwrap();
        let mut base = fast_env();
        if preset.keep_ended {
            base.extend(KEEP_ENDED.map(|(k, v)| (k.to_owned(), v.to_owned())));
        }
        base.extend(
            [
                ("WAFT_STORE_URL", database.as_str()),
                ("WAFT_STORE_MAX_CONNECTIONS", "4"),
                ("WAFT_QUEUE_SQS_ENDPOINT_URL", sqs.endpoint.as_str()),
                ("WAFT_QUEUE_SQS_PREFIX", prefix.as_str()),
                ("WAFT_PEERS_FRONTEND", frontend.as_str()),
                ("WAFT_PEERS_CONTROLLER", controller.as_str()),
                ("WAFT_PEERS_HSC", hsc.as_str()),
                ("WAFT_AUTH_ENABLED", "true"),
                ("WAFT_AUTH_CLUSTER_TOKEN", token.as_str()),
                ("WAFT_TLS_CERT", cert_path.as_str()),
                ("WAFT_TLS_KEY", key_path.as_str()),
                ("WAFT_TLS_CA", cert_path.as_str()),
                ("WAFT_SECRETS_KEY_FILE", secrets_key_path.as_str()),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned())),
        );
        let mut roles = vec![
            ("hsc".to_owned(), "hsc", hsc.clone()),
            ("frontend".to_owned(), "frontend", frontend.clone()),
            // Two consumers: polls and periodic schedules must not double up.
            ("consumer".to_owned(), "consumer", addr("consumer")),
            ("consumer2".to_owned(), "consumer", addr("consumer")),
            ("controller".to_owned(), "controller", controller),
        ];
        for n in 1..=executors {
            roles.push((format!("executor{n}"), "executor", addr("executor")));
        }
        let hsc_link = match layout.hsc_link {
            true => Some(proxy::Proxy::start(hsc.clone()).await),
            false => None,
        };
        let sqs_link = match layout.sqs_link {
            true => {
                let upstream = sqs.endpoint.trim_start_matches("http://");
                Some(proxy::Proxy::start(upstream.to_owned()).await)
            }
            false => None,
        };
        base.extend(
            layout
                .env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        let mut processes = BTreeMap::new();
        for (name, role, listen) in roles {
            let mut env = base.clone();
            env.push(("WAFT_LISTEN".into(), listen));
            env.push(("WAFT_METRICS_LISTEN".into(), addr("metrics")));
            if role == "executor" {
                let journal = dir.path().join(format!("{name}.journal"));
                env.push((
                    "WAFT_EXECUTOR_JOURNAL".into(),
                    journal.display().to_string(),
                ));
                if let Some(link) = &hsc_link {
                    env.push(("WAFT_PEERS_HSC".into(), link.addr.clone()));
                }
            }
            if let (Some(link), "controller") = (&sqs_link, role) {
                let endpoint = format!("http://{}", link.addr);
                env.push(("WAFT_QUEUE_SQS_ENDPOINT_URL".into(), endpoint));
            }
            let mut process = Process {
                name: name.clone(),
                program: preset
                    .programs
                    .get(&name)
                    .cloned()
                    .unwrap_or_else(|| env!("CARGO_BIN_EXE_waft").into()),
                args: vec!["serve".into(), role.into()],
                env,
                child: None,
                log: dir.path().join(format!("{name}.log")),
                killed_at: Vec::new(),
            };
            process.start();
            processes.insert(name, process);
        }
        let cluster = Self {
            frontend: FrontendClient::new(
                waft_api::channel_with(
                    &frontend,
                    waft_api::ChannelOptions {
                        token: Some(&token),
                        ca: Some(tls.cert.pem().as_bytes()),
                    },
                )
                .unwrap(),
            ),
            frontend_addr: frontend.clone(),
            processes,
            sqs: Some(waft_queue::SqsConfig {
                endpoint_url: Some(sqs.endpoint.clone()),
                prefix,
                visibility_timeout: Duration::from_secs(5),
                ..waft_queue::SqsConfig::default()
            }),
            hsc: Some(hsc),
            token: Some(token),
            ca: Some((tls.cert.pem().into_bytes(), cert)),
            database: Some(database),
            hsc_link,
            sqs_link,
            dir,
        };
        cluster.ready().await;
        Some(cluster)
    }

    /// The names of `lambda`'s SQS queues, asked of the queue server; `None`
    /// when the cluster's queues are not SQS (the embedded mode).
    pub async fn sqs_queues_of(&self, lambda: &str) -> Option<Vec<String>> {
        use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
        let sqs = self.sqs.as_ref()?;
        let config = aws_sdk_sqs::Config::builder()
            .http_client(waft_queue::https_client())
            .behavior_version(BehaviorVersion::latest())
            .endpoint_url(sqs.endpoint_url.clone()?)
            .region(Region::new(sqs.region.clone()))
            .credentials_provider(Credentials::new("waft", "waft", None, None, "static"))
            .build();
        let client = aws_sdk_sqs::Client::from_conf(config);
        // `<prefix>-<lambda>-p<priority>`: every priority's.
        let first = waft_queue::QueueKey::new(lambda, 0).queue_name(&sqs.prefix);
        let prefix = first.trim_end_matches("p0");
        let listed = client
            .list_queues()
            .queue_name_prefix(prefix)
            .send()
            .await
            .expect("list the SQS queues");
        let names = listed.queue_urls().iter();
        Some(
            names
                .filter_map(|url| url.rsplit('/').next())
                .map(String::from)
                .collect(),
        )
    }
}
