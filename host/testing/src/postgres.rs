//! A throwaway PostgreSQL cluster per test process.
//!
//! The first test that asks starts one: `initdb` into a temporary directory
//! and `postgres` on a free loopback port, with durability off (tests only:
//! benchmarks must use their own, durable, cluster). PostgreSQL refuses to
//! run as root, so as root the cluster runs as the `postgres` user. A shell
//! watchdog stops the server and deletes its files when the test process
//! exits, however it exits; until then it starts the server again whenever
//! it dies, so a test may crash it ([`TestPostgres::crash`]) and see it
//! recover. Each test then gets a database of its own.
//!
//! `WAFT_TEST_DATABASE_URL` points the tests at an existing server instead.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use sqlx::{Connection, Executor, PgConnection};

/// A PostgreSQL server for tests.
#[derive(Debug)]
pub struct TestPostgres {
    /// URL of the server's `postgres` database, for creating others.
    admin_url: String,
    /// The data directory of a cluster this process started.
    data: Option<PathBuf>,
}

/// The test server, started on first use; `None` (outside CI only) when
/// PostgreSQL cannot be started here, with the reason printed.
pub fn postgres() -> Option<&'static TestPostgres> {
    static SERVER: OnceLock<Result<TestPostgres, String>> = OnceLock::new();
    match SERVER.get_or_init(|| start(Durability::Off)) {
        Ok(server) => Some(server),
        Err(why) => crate::unavailable("PostgreSQL", why),
    }
}

/// Whether the cluster syncs its writes to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// `fsync=off`: fast, for tests only.
    Off,
    /// PostgreSQL's defaults: what production runs, for benchmarks.
    Full,
}

impl TestPostgres {
    /// Starts a cluster of its own (not the shared test one), e.g. a durable
    /// one for benchmarks. It stops when the process exits.
    pub fn start(durability: Durability) -> Result<Self, String> {
        start(durability)
    }
}

impl TestPostgres {
    /// Creates an empty database and returns its URL.
    pub async fn fresh_database(&self) -> String {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "waft_test_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut admin = connect_with_retry(&self.admin_url).await;
        admin
            .execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .await
            .expect("CREATE DATABASE");
        let _ = admin.close().await;
        replace_database(&self.admin_url, &name)
    }

    /// Crashes the server: an immediate shutdown (`SIGQUIT` to the
    /// postmaster), which drops every connection and makes the next start
    /// run crash recovery. The watchdog starts it again within a second;
    /// [`wait_ready`](Self::wait_ready) waits for that.
    pub fn crash(&self) -> Result<(), String> {
        let data = self
            .data
            .as_ref()
            .ok_or("the server is not this process's (WAFT_TEST_DATABASE_URL)")?;
        let pid_file = std::fs::read_to_string(data.join("postmaster.pid"))
            .map_err(|e| format!("no postmaster.pid (is the server up?): {e}"))?;
        let pid = pid_file
            .lines()
            .next()
            .unwrap_or_default()
            .trim()
            .to_owned();
        let status = Command::new("kill")
            .args(["-QUIT", &pid])
            .status()
            .map_err(|e| format!("cannot run kill: {e}"))?;
        if !status.success() {
            return Err(format!("cannot signal the postmaster (pid {pid})"));
        }
        Ok(())
    }

    /// Waits until the server accepts connections again.
    pub async fn wait_ready(&self) {
        drop(connect_with_retry(&self.admin_url).await);
    }
}

fn replace_database(url: &str, name: &str) -> String {
    match url.rsplit_once('/') {
        Some((base, _)) => format!("{base}/{name}"),
        None => format!("{url}/{name}"),
    }
}

async fn connect_with_retry(url: &str) -> PgConnection {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match PgConnection::connect(url).await {
            Ok(connection) => return connection,
            // The server may still be starting.
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => panic!("cannot connect to the test PostgreSQL at {url}: {error}"),
        }
    }
}

fn start(durability: Durability) -> Result<TestPostgres, String> {
    if let Ok(url) = std::env::var("WAFT_TEST_DATABASE_URL") {
        return Ok(TestPostgres {
            admin_url: url,
            data: None,
        });
    }
    let bin = find_binaries().ok_or(
        "no PostgreSQL server binaries (initdb, postgres) on PATH or in /usr/lib/postgresql/*/bin; \
         install postgresql or set WAFT_TEST_DATABASE_URL",
    )?;
    let as_root = run_output("id", &["-u"]).is_some_and(|uid| uid.trim() == "0");
    let cluster = Cluster {
        dir: cluster_dir(as_root)?,
        bin,
        as_root,
    };
    let data = cluster.initdb()?;
    let port = crate::free_port().ok_or("no free loopback port")?;
    cluster.spawn_watchdog(&data, port, durability)?;
    cluster.wait_listening(port)?;
    Ok(TestPostgres {
        admin_url: format!("postgres://postgres@127.0.0.1:{port}/postgres"),
        data: Some(data),
    })
}

/// A temporary directory for a cluster's files, its user's when the
/// cluster runs as `postgres` (PostgreSQL refuses root).
fn cluster_dir(as_root: bool) -> Result<PathBuf, String> {
    let dir = tempfile::Builder::new()
        .prefix("waft-pg-")
        .tempdir()
        .map_err(|e| format!("cannot create a temporary directory: {e}"))?
        .keep();
    if as_root {
        let owner = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&dir)
            .status()
            .map_err(|e| format!("cannot run chown: {e}"))?;
        if !owner.success() {
            return Err(
                "cannot hand the data directory to the postgres user (is there one?)".into(),
            );
        }
    }
    Ok(dir)
}

/// A cluster being started: its directory, the server's binaries, and
/// whether it runs as the `postgres` user.
struct Cluster {
    dir: PathBuf,
    bin: PathBuf,
    as_root: bool,
}

impl Cluster {
    /// Makes the data directory; its path.
    fn initdb(&self) -> Result<PathBuf, String> {
        let data = self.dir.join("data");
        let initdb = as_user(self.as_root, &self.bin.join("initdb"))
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",
                "--no-instructions",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| format!("cannot run initdb: {e}"))?;
        if !initdb.status.success() {
            return Err(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&initdb.stderr)
            ));
        }
        Ok(data)
    }

    /// The watchdog: runs the server (again, whenever it dies), and stops
    /// it and removes its files once the test process (our pid) is gone.
    fn spawn_watchdog(&self, data: &Path, port: u16, durability: Durability) -> Result<(), String> {
        let durability = match durability {
            Durability::Off => "-c fsync=off -c synchronous_commit=off -c full_page_writes=off",
            Durability::Full => "",
        };
        let script = format!(
            "while [ -d /proc/{parent} ]; do \
               {postgres} -D {data} -k {dir} -p {port} -c listen_addresses=127.0.0.1 \
               {durability} -c max_connections=300 \
               >> {dir}/server.log 2>&1 & server=$!; \
               while [ -d /proc/{parent} ] && kill -0 $server 2>/dev/null; do sleep 0.2; done; \
             done; \
             kill -INT $server 2>/dev/null; wait $server; rm -rf {dir}",
            postgres = self.bin.join("postgres").display(),
            data = data.display(),
            dir = self.dir.display(),
            parent = std::process::id(),
        );
        as_user(self.as_root, Path::new("sh"))
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start postgres: {e}"))?;
        Ok(())
    }

    /// Waits up to 30 s for the server to take connections on `port`.
    fn wait_listening(&self, port: u16) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
                return Err(format!("postgres did not start within 30 s: {log}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }
}

fn as_user(as_root: bool, program: &Path) -> Command {
    if as_root {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

fn find_binaries() -> Option<PathBuf> {
    let on_path = run_output("sh", &["-c", "command -v initdb"])
        .map(|path| PathBuf::from(path.trim()))
        .filter(|path| path.is_file())
        .and_then(|path| std::fs::canonicalize(path).ok())
        .and_then(|path| path.parent().map(Path::to_path_buf));
    let candidates = on_path.into_iter().chain(
        std::fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .map(|entry| entry.path().join("bin")),
    );
    candidates
        .into_iter()
        .find(|dir| dir.join("initdb").is_file() && dir.join("postgres").is_file())
}

fn run_output(program: &str, args: &[&str]) -> Option<String> {
    let output = Command::new(program).args(args).output().ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}
