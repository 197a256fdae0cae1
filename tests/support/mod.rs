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
//!
//! One module per concept: a [`Process`] and its log (`process.rs`), the
//! two modes (`dev.rs`, `distributed.rs`), what every process is given
//! (`settings.rs`, `ports.rs`), driving an installation as its users do
//! (`client.rs`), and the executions the executors record (`runs.rs`).

#![allow(dead_code)]

mod client;
mod dev;
mod distributed;
mod ports;
mod process;
pub mod proxy;
mod runs;
mod settings;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tempfile::TempDir;
use waft_api::FrontendClient;
use waft_services::ClientApi;

// Each test binary names only some of these.
#[allow(unused_imports)]
pub use distributed::{Layout, Preset};
#[allow(unused_imports)]
pub use process::Process;
#[allow(unused_imports)]
pub use runs::Run;

/// Where each process's log ended at one instant.
#[derive(Default)]
pub struct LogMarks(BTreeMap<String, usize>);

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

impl Cluster {
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
        self.logs_since(&LogMarks::default())
    }

    /// Where each process's log ends now, for [`Cluster::logs_since`].
    pub fn log_marks(&self) -> LogMarks {
        LogMarks(
            self.processes
                .iter()
                .map(|(name, p)| (name.clone(), p.log().len()))
                .collect(),
        )
    }

    /// What each process logged after `marks`: for the failure of one
    /// scenario among many on a shared installation.
    pub fn logs_since(&self, marks: &LogMarks) -> String {
        self.processes
            .iter()
            .map(|(name, p)| {
                let log = p.log();
                let from = marks.0.get(name).copied().unwrap_or(0).min(log.len());
                let tail = log.get(from..).unwrap_or(&log);
                format!("===== {} =====\n{tail}", p.name)
            })
            .collect()
    }
}
