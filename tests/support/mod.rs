//! A Waft installation for end-to-end tests: real `waft` processes, in
//! either mode, and what the tests need to drive and observe them.
//!
//! - [`Cluster::dev`]: one `waft dev` process (SQLite, in-process queues).
//! - [`Cluster::distributed`]: `waft serve` processes for every role, on a
//!   fresh database of the test PostgreSQL cluster and the test SQS server
//!   (`None` on a laptop without them; a failure under `CI=true`).
//!
//! Timings are shortened (heartbeat every 300 ms, timeout 2 s) so failure
//! cases recover within seconds; the safety rule still holds. Every
//! executor keeps an execution journal, from which [`Cluster::runs`] tells
//! when each instance really ran.

#![allow(dead_code)]

pub mod proxy;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use tempfile::TempDir;
use waft_api::FrontendClient;
use waft_core::{Backoff, LambdaConfig};
use waft_services::JournalEvent;
use waft_services::{ClientApi, RunAt, TaskRequest};
use waft_store::{Lambda, Task};

/// Settings every process of a test cluster gets, as `WAFT_*` variables.
const FAST: &[(&str, &str)] = &[
    ("WAFT_HEARTBEAT_INTERVAL", "300ms"),
    ("WAFT_HEARTBEAT_RPC_TIMEOUT", "200ms"),
    ("WAFT_HEARTBEAT_TIMEOUT", "2s"),
    ("WAFT_CONSUMER_POLL_INTERVAL", "100ms"),
    ("WAFT_CONSUMER_ENQUEUE_TIMEOUT", "10s"),
    ("WAFT_QUEUE_VISIBILITY_TIMEOUT", "5s"),
    ("WAFT_CONTROLLER_RECEIVE_WAIT", "1s"),
    ("WAFT_CONTROLLER_REFRESH", "200ms"),
    ("WAFT_EXECUTOR_REFRESH", "200ms"),
    ("WAFT_EXECUTOR_NEXT_WORK_WAIT", "500ms"),
    ("WAFT_EXECUTOR_SHUTDOWN_GRACE", "1s"),
    ("WAFT_RETENTION_INTERVAL", "200ms"),
    ("WAFT_LOG", "info"),
    // One compile cache for every process of every test: a 15 MB Python or
    // JavaScript component takes minutes to compile in a debug build, and
    // each mode's executors, and the runtime's own tests, would compile
    // the same ones again.
    (
        "WAFT_RUNTIME_CACHE_DIR",
        concat!(env!("CARGO_TARGET_TMPDIR"), "/compiled-samples"),
    ),
];

/// One `waft` process and its log.
pub struct Process {
    pub name: String,
    /// The `waft` binary it runs: the one under test unless a test says
    /// otherwise (another release's, for a rolling upgrade).
    pub program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    child: Option<Child>,
    log: PathBuf,
    /// When each incarnation was killed, for intervals left open.
    pub killed_at: Vec<SystemTime>,
}

impl Process {
    /// The value of one of its environment variables.
    pub fn env(&self, key: &str) -> Option<&str> {
        // The last setting wins, as it does for the process.
        self.env
            .iter()
            .rev()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.as_str())
    }

    /// Where its gRPC server listens.
    pub fn listen(&self) -> String {
        self.env("WAFT_LISTEN")
            .expect("a listen address")
            .to_owned()
    }

    fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log file");
        let child = Command::new(&self.program)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env_remove("RUST_BACKTRACE")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("waft starts");
        self.child = Some(child);
    }

    /// Kills it at once (SIGKILL): a crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            self.killed_at.push(SystemTime::now());
        }
    }

    /// The running incarnation's process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Starts it again, same arguments.
    pub fn restart(&mut self) {
        self.kill();
        self.start();
    }

    /// Sets one more setting (`WAFT_*`) for its next start.
    pub fn set_env(&mut self, key: &str, value: &str) {
        self.env.push((key.to_owned(), value.to_owned()));
    }

    /// Starts it again with one more setting (`WAFT_*`), which wins over
    /// any earlier one.
    pub fn restart_with(&mut self, key: &str, value: &str) {
        self.set_env(key, value);
        self.restart();
    }

    /// Everything it printed, every incarnation.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A running installation.
pub struct Cluster {
    pub frontend: FrontendClient,
    pub frontend_addr: String,
    pub processes: BTreeMap<String, Process>,
    /// The queues and the HSC's address, in distributed mode.
    pub sqs: Option<waft_queue::SqsConfig>,
    pub hsc: Option<String>,
    /// The cluster token, when auth is on (the distributed mode).
    pub token: Option<String>,
    /// The certificate every process serves and trusts, when TLS is on
    /// (the distributed mode): PEM, and its file.
    pub ca: Option<(Vec<u8>, PathBuf)>,
    /// The store's database, in distributed mode.
    pub database: Option<String>,
    /// The proxy between the executors and the HSC, if asked for.
    pub hsc_link: Option<proxy::Proxy>,
    /// The proxy between the Controller and the queue service, counting
    /// its requests, if asked for.
    pub sqs_link: Option<proxy::Proxy>,
    dir: TempDir,
}

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

/// Retention `forever` for every end.
const KEEP_ENDED: [(&str, &str); 4] = [
    ("WAFT_RETENTION_SUCCESS", "forever"),
    ("WAFT_RETENTION_FATAL", "forever"),
    ("WAFT_RETENTION_DROPPED", "forever"),
    ("WAFT_RETENTION_CANCELLED", "forever"),
];

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

/// One execution of a task, from an executor's journal.
#[derive(Debug, Clone)]
pub struct Run {
    pub task: String,
    pub lease: i64,
    /// The executor process.
    pub process: String,
    pub start: SystemTime,
    /// When the instance was gone: its end record, else when its process
    /// was killed, else now (still running).
    pub end: SystemTime,
    /// How it ended; `None` when it has no end record.
    pub outcome: Option<String>,
}

/// A loopback port for a process to listen on: free when handed out, never
/// handed out twice by this test process, and outside the kernel's
/// ephemeral range. Every outgoing connection takes its local port from
/// that range, so a port found free there (bound to port 0, then let go)
/// may be a connection's by the time the process binds it: on a busy
/// machine a Frontend failed to start so. Outside it, only another
/// listener could take it, and a restarted process gets its port back.
fn port() -> u16 {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU32, Ordering};

    static NEXT: OnceLock<AtomicU32> = OnceLock::new();
    let (low, high) = listening_ports();
    let span = u32::from(high - low);
    // From a random start, so that test processes running at once seldom
    // try the same ports.
    let next = NEXT.get_or_init(|| AtomicU32::new(fastrand::u32(..span)));
    for _ in 0..span {
        let candidate = low + (next.fetch_add(1, Ordering::Relaxed) % span) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", candidate)).is_ok() {
            return candidate;
        }
    }
    panic!("no free loopback port in {low}..{high}");
}

/// Ports below the kernel's ephemeral range (Linux's default is
/// 32768–60999), or above it when that leaves more room.
fn listening_ports() -> (u16, u16) {
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| {
            let mut ends = range.split_whitespace().map(|end| end.parse::<u16>().ok());
            Some((ends.next()??, ends.next()??))
        })
        .unwrap_or((32768, 60999));
    let below = (10_000, ephemeral.0.max(10_000));
    let above = (ephemeral.1.saturating_add(1).max(10_000), u16::MAX);
    let room = |(low, high): (u16, u16)| high.saturating_sub(low);
    let ports = if room(below) >= room(above) {
        below
    } else {
        above
    };
    assert!(
        room(ports) >= 1000,
        "the ephemeral port range {ephemeral:?} leaves no room for listening ports"
    );
    ports
}

fn fast_env() -> Vec<(String, String)> {
    FAST.iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

impl Cluster {
    /// The names of `lambda`'s SQS queues, asked of the queue server; `None`
    /// when the cluster's queues are not SQS (the embedded mode).
    pub async fn sqs_queues_of(&self, lambda: &str) -> Option<Vec<String>> {
        use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
        let sqs = self.sqs.as_ref()?;
        let config = aws_sdk_sqs::Config::builder()
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
                dir.path().join("data").display().to_string(),
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

    /// Waits until the Frontend answers.
    pub async fn ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.frontend.lambda_list().await.is_err() {
            assert!(
                Instant::now() < deadline,
                "the cluster did not start:\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn process(&mut self, name: &str) -> &mut Process {
        self.processes
            .get_mut(name)
            .expect("a process of that name")
    }

    /// Every process's log, for failure messages.
    pub fn logs(&self) -> String {
        self.processes
            .values()
            .map(|p| format!("===== {} =====\n{}", p.name, p.log()))
            .collect()
    }

    /// Deploys a sample with quick retries.
    pub async fn deploy(
        &self,
        name: &str,
        file: &str,
        tune: impl FnOnce(&mut LambdaConfig),
    ) -> Lambda {
        let mut config = LambdaConfig {
            backoff: Backoff {
                base: Duration::from_millis(50),
                factor: 2.0,
                max: Duration::from_millis(200),
            },
            ..LambdaConfig::default()
        };
        tune(&mut config);
        let wasm = std::fs::read(file).unwrap();
        self.frontend
            .lambda_deploy(name, wasm, config)
            .await
            .unwrap_or_else(|e| panic!("deploy {name}: {e}"))
    }

    /// Schedules one task now; its id.
    pub async fn schedule(
        &self,
        lambda: &str,
        payload: serde_json::Value,
        priority: Option<u8>,
    ) -> String {
        let request = TaskRequest {
            lambda: lambda.into(),
            payload: payload.to_string().into_bytes(),
            priority,
            run_at: RunAt::Now,
            ..TaskRequest::default()
        };
        self.frontend
            .task_schedule_many(vec![request])
            .await
            .unwrap()
            .remove(0)
            .id
    }

    /// A channel to one of its servers presenting `token`, over TLS when
    /// the cluster uses it.
    pub fn channel(&self, address: &str, token: Option<&str>) -> waft_api::WaftChannel {
        let ca = self.ca.as_ref().map(|(pem, _)| pem.as_slice());
        waft_api::channel_with(address, waft_api::ChannelOptions { token, ca }).unwrap()
    }

    /// What process `name` serves at `/metrics`.
    pub async fn metrics(&self, name: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let addr = self.processes[name]
            .env("WAFT_METRICS_LISTEN")
            .expect("a metrics address")
            .to_owned();
        let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        response
    }

    /// `waft ARGS`, pointed at this cluster.
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_waft"));
        command.args(args).env("WAFT_SERVER", &self.frontend_addr);
        if let Some(token) = &self.token {
            command.env("WAFT_TOKEN", token);
        }
        if let Some((_, file)) = &self.ca {
            command.env("WAFT_CA", file);
        }
        command
    }

    /// Runs a client command against this cluster; its standard output.
    pub fn cli(&self, args: &[&str]) -> String {
        let output = self.command(args).output().expect("waft runs");
        assert!(
            output.status.success(),
            "waft {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    }

    /// Runs `waft ARGS` against the cluster, expecting it to fail: its exit
    /// code and what it wrote to stderr.
    pub fn cli_failing(&self, args: &[&str]) -> (i32, String) {
        let output = self.command(args).output().expect("waft runs");
        assert!(!output.status.success(), "waft {args:?} succeeded");
        let code = output.status.code().unwrap_or(-1);
        (code, String::from_utf8_lossy(&output.stderr).into_owned())
    }

    /// Waits until a task ends.
    pub async fn finished(&self, id: &str, within: Duration) -> Task {
        self.until(id, within, |t| t.status.is_terminal()).await
    }

    /// Waits until a task satisfies `done`.
    pub async fn until(&self, id: &str, within: Duration, done: impl Fn(&Task) -> bool) -> Task {
        let deadline = Instant::now() + within;
        loop {
            let task = self.frontend.task_get(id).await.unwrap();
            if done(&task) {
                return task;
            }
            assert!(
                Instant::now() < deadline,
                "task {id} still {:?} after {within:?}: {task:#?}\n{}",
                task.status,
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Every execution the executors' journals record.
    pub fn runs(&self) -> Vec<Run> {
        let at = |us: i64| SystemTime::UNIX_EPOCH + Duration::from_micros(us.max(0) as u64);
        let mut runs = Vec::new();
        for process in self.processes.values() {
            let Some(path) = process.env("WAFT_EXECUTOR_JOURNAL") else {
                continue;
            };
            let records = waft_services::read_journal(path.as_ref()).unwrap_or_default();
            // Open executions by task and lease, oldest first.
            let mut open: BTreeMap<(String, i64), Vec<SystemTime>> = BTreeMap::new();
            for record in records {
                let key = (record.task, record.lease);
                match record.event {
                    JournalEvent::Start => open.entry(key).or_default().push(at(record.at_us)),
                    JournalEvent::End => {
                        let Some(starts) = open.get_mut(&key) else {
                            continue;
                        };
                        if starts.is_empty() {
                            continue;
                        }
                        let start = starts.remove(0);
                        runs.push(Run {
                            task: key.0,
                            lease: key.1,
                            process: process.name.clone(),
                            start,
                            end: at(record.at_us),
                            outcome: record.outcome,
                        });
                    }
                }
            }
            for ((task, lease), starts) in open {
                for start in starts {
                    let end = process
                        .killed_at
                        .iter()
                        .copied()
                        .find(|k| *k >= start)
                        .unwrap_or_else(SystemTime::now);
                    runs.push(Run {
                        task: task.clone(),
                        lease,
                        process: process.name.clone(),
                        start,
                        end,
                        outcome: None,
                    });
                }
            }
        }
        runs
    }

    /// The execution intervals of `task`, in order of their start.
    pub fn executions(&self, task: &str) -> Vec<(SystemTime, SystemTime)> {
        let mut intervals: Vec<_> = self
            .runs()
            .into_iter()
            .filter(|run| run.task == task)
            .map(|run| (run.start, run.end))
            .collect();
        intervals.sort();
        intervals
    }

    /// Asserts that no two executions of `task` overlapped in time.
    pub fn assert_no_overlap(&self, task: &str) -> usize {
        let intervals = self.executions(task);
        for pair in intervals.windows(2) {
            assert!(
                pair[0].1 <= pair[1].0,
                "two executions of {task} overlapped: {intervals:?}\n{}",
                self.logs()
            );
        }
        intervals.len()
    }
}
