//! The `waft dev` installation: every role in one process, on SQLite and
//! in-process queues, with auth on or off, on a fresh data directory or
//! one a test prepared (an earlier installation's).

use std::collections::BTreeMap;

use tempfile::TempDir;
use waft_api::FrontendClient;

use super::Cluster;
use super::ports::port;
use super::process::Process;
use super::settings::{KEEP_ENDED, fast_env};

impl Cluster {
    /// `waft dev`'s data directory.
    pub fn data_dir(&self) -> std::path::PathBuf {
        self.dir.path().join("data")
    }

    /// `waft dev`, every role in one process.
    pub async fn dev() -> Self {
        Self::dev_with(false).await
    }

    /// `waft dev`, with auth on (`token` is the cluster token) or off.
    pub async fn dev_with(auth: bool) -> Self {
        Self::dev_on(auth.then(waft_services::auth::new_secret), |_| {}).await
    }

    /// `waft dev` with auth on when `token` (the cluster token) is given,
    /// on a data directory `prepare` fills first (an existing database, a
    /// secrets key).
    pub async fn dev_on(token: Option<String>, prepare: impl FnOnce(&std::path::Path)) -> Self {
        Self::dev_on_with(token, prepare, Vec::new()).await
    }

    /// [`Cluster::dev_on`], with settings `extra` beside (and over) the
    /// fast ones.
    pub async fn dev_on_with(
        token: Option<String>,
        prepare: impl FnOnce(&std::path::Path),
        extra: Vec<(String, String)>,
    ) -> Self {
        let dir = TempDir::new().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        prepare(&data);
        let addr = format!("127.0.0.1:{}", port());
        let mut process = Process {
            name: "dev".into(),
            program: env!("CARGO_BIN_EXE_waft").into(),
            args: vec![
                "dev".into(),
                "--data-dir".into(),
                data.display().to_string(),
                "--listen".into(),
                addr.clone(),
            ],
            env: {
                let mut env = fast_env();
                env.push((
                    "WAFT_METRICS_LISTEN".into(),
                    format!("127.0.0.1:{}", port()),
                ));
                env.push((
                    "WAFT_EXECUTOR_JOURNAL".into(),
                    dir.path().join("dev.journal").display().to_string(),
                ));
                if let Some(token) = &token {
                    env.push(("WAFT_AUTH_ENABLED".into(), "true".into()));
                    env.push(("WAFT_AUTH_CLUSTER_TOKEN".into(), token.clone()));
                }
                // A prepared data directory is an earlier installation's.
                env.extend(KEEP_ENDED.map(|(k, v)| (k.to_owned(), v.to_owned())));
                env.extend(extra);
                env
            },
            child: None,
            log: dir.path().join("dev.log"),
            killed_at: Vec::new(),
        };
        process.start();
        let channel = waft_api::channel_with(
            &addr,
            waft_api::ChannelOptions {
                token: token.as_deref(),
                ca: None,
            },
        );
        let cluster = Self {
            frontend: FrontendClient::new(channel.unwrap()),
            frontend_addr: addr.clone(),
            processes: BTreeMap::from([("dev".to_owned(), process)]),
            sqs: None,
            hsc: None,
            token,
            ca: None,
            database: None,
            hsc_link: None,
            sqs_link: None,
            dir,
        };
        cluster.ready().await;
        cluster
    }
}
