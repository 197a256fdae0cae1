//! An SQS-compatible server per test process: fauxqs (npm), on loopback.
//!
//! `scripts/setup` installs fauxqs into `.tools/` at the repository's root;
//! `WAFT_TEST_SQS_URL` points the tests at a running server instead. Like
//! the Postgres cluster, the server stops when the test process exits.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// An SQS-compatible server for tests.
#[derive(Debug)]
pub struct TestSqs {
    /// The endpoint URL to give the SQS client.
    pub endpoint: String,
}

/// The test server, started on first use; `None` (outside CI only) when it
/// cannot be started here, with the reason printed.
pub fn sqs() -> Option<&'static TestSqs> {
    static SERVER: OnceLock<Result<TestSqs, String>> = OnceLock::new();
    match SERVER.get_or_init(start) {
        Ok(server) => Some(server),
        Err(why) => crate::unavailable("the SQS-compatible server (fauxqs)", why),
    }
}

fn start() -> Result<TestSqs, String> {
    if let Ok(endpoint) = std::env::var("WAFT_TEST_SQS_URL") {
        return Ok(TestSqs { endpoint });
    }
    let cli = fauxqs_cli();
    if !cli.is_file() {
        return Err(format!(
            "{} is missing: run scripts/setup (it installs fauxqs with npm)",
            cli.display()
        ));
    }
    let port = crate::free_port().ok_or("no free loopback port")?;
    let script = format!(
        "node {cli} & server=$!; \
         while [ -d /proc/{parent} ] && kill -0 $server 2>/dev/null; do sleep 1; done; \
         kill $server 2>/dev/null",
        cli = cli.display(),
        parent = std::process::id(),
    );
    Command::new("sh")
        .args(["-c", &script])
        .env("FAUXQS_PORT", port.to_string())
        .env("FAUXQS_LOGGER", "false")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start fauxqs: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return Err("fauxqs did not start within 30 s".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(TestSqs {
        endpoint: format!("http://127.0.0.1:{port}"),
    })
}

fn fauxqs_cli() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.tools/node_modules/fauxqs/dist/cli.js")
}
