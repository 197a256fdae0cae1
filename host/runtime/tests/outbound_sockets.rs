//! Outbound connections are bounded across executions, not only within
//! each: lambdas that each hold a thousand sockets leave the host the file
//! descriptors it needs for its own connections, and a request over the
//! bound is refused with a line in the task's log.
//!
//! A test binary of its own, with one test, outside `tests/runtime/`: it
//! counts the file descriptors the whole process holds (`/proc/self/fd`),
//! so nothing else may run beside it.

#[path = "runtime/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::output;
use tokio::io::AsyncReadExt as _;
use waft_core::{Grants, Limits, OutboundLimits};
use waft_runtime::{
    Execution, KillSwitch, LogSource, PreparedLambda, RecordingHost, Runtime, RuntimeConfig,
    Sandbox, TaskInput,
};
use waft_sample_artifacts as samples;
use waft_testing::http::{HttpServer, Reply};

/// A loopback server that accepts every connection and never answers,
/// holding each connection until the client hangs up; it counts the
/// connections it accepted and those that ended.
struct Sink {
    addr: std::net::SocketAddr,
    /// Accepted, ended.
    counts: Arc<[AtomicUsize; 2]>,
    serving: tokio::task::JoinHandle<()>,
}

impl Sink {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let counts: Arc<[AtomicUsize; 2]> = Arc::default();
        let counting = counts.clone();
        let serving = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counting[0].fetch_add(1, Ordering::SeqCst);
                let counting = counting.clone();
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let _ = stream.read_to_end(&mut request).await;
                    counting[1].fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        Self {
            addr,
            counts,
            serving,
        }
    }

    fn accepted(&self) -> usize {
        self.counts[0].load(Ordering::SeqCst)
    }

    fn ended(&self) -> usize {
        self.counts[1].load(Ordering::SeqCst)
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.serving.abort();
    }
}

/// File descriptors this process holds open.
/// Descriptors this process holds open, but for the sink's own sockets
/// (its listener and the connections it accepted): the sink closes each
/// only once it reads the connection's end, which a busy machine may do
/// well after the execution closed its side and opened another (a run
/// beside a busy core counted 481 descriptors against a bound of 479
/// when both sides were counted). The sink's sockets are those the
/// kernel's table lists on the sink's port, read before and after the
/// descriptors, so that one accepted or closed meanwhile is still known.
fn open_fds_but_the_sinks(sink: std::net::SocketAddr) -> usize {
    let local = format!(":{:04X}", sink.port());
    let sinks = || {
        tcp_table()
            .into_iter()
            .filter(|fields| fields.len() > 9 && fields[1].ends_with(&local))
            .map(|fields| format!("socket:[{}]", fields[9]))
            .collect::<Vec<_>>()
    };
    let before = sinks();
    let targets: Vec<String> = std::fs::read_dir("/proc/self/fd").map_or(Vec::new(), |entries| {
        entries
            .filter_map(Result::ok)
            .filter_map(|entry| std::fs::read_link(entry.path()).ok())
            .map(|target| target.to_string_lossy().into_owned())
            .collect()
    });
    let sinks: std::collections::HashSet<String> = before.into_iter().chain(sinks()).collect();
    targets
        .iter()
        .filter(|target| !sinks.contains(*target))
        .count()
}

/// Connections to `sink` established now, counted by their client side in
/// the kernel's table. A client closes its socket before it gives back its
/// permit, so no count here can see a connection that the cap let through
/// twice. The table is read in pages, not as one snapshot: while sockets
/// open and close between two reads, the kernel may list one socket twice
/// (a busy machine showed 204 for a cap of 200), so each is counted once,
/// by its local address.
fn connected_to(sink: std::net::SocketAddr) -> usize {
    const ESTABLISHED: &str = "01";
    let remote = format!(":{:04X}", sink.port());
    tcp_table()
        .into_iter()
        .filter(|fields| {
            fields.len() > 3 && fields[2].ends_with(&remote) && fields[3] == ESTABLISHED
        })
        .map(|fields| fields[1].clone())
        .collect::<std::collections::HashSet<_>>()
        .len()
}

/// The kernel's table of IPv4 TCP sockets, a row of fields per socket.
fn tcp_table() -> Vec<Vec<String>> {
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .map(|line| line.split_whitespace().map(str::to_owned).collect())
        .collect()
}

fn granted(origin: &str, limits: OutboundLimits) -> Sandbox {
    Sandbox {
        limits: Limits::default(),
        grants: Arc::new(Grants {
            outbound: vec![origin.parse().unwrap()],
            outbound_limits: limits,
            ..Grants::default()
        }),
        secrets: Arc::default(),
        ..Sandbox::default()
    }
}

fn task(lambda: &str, n: usize, payload: &Value) -> TaskInput {
    support::task(&format!("01SOCKETS{n}"), lambda, payload)
}

async fn run(lambda: &PreparedLambda, task: TaskInput, sandbox: Sandbox) -> Execution {
    let host = Arc::new(RecordingHost::default());
    lambda.run(task, &sandbox, host, &KillSwitch::new()).await
}

/// The platform's log lines that say the executor's bound was met.
fn refused_by_the_executor(execution: &Execution) -> usize {
    execution
        .log
        .records
        .iter()
        .filter(|r| r.source == LogSource::Waft)
        .filter(|r| {
            r.message
                .contains("outbound connections open for all tasks")
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executions_together_stay_under_the_executors_connection_cap() {
    const CAP: usize = 200;
    let sink = Sink::start().await;
    let runtime = Runtime::new(RuntimeConfig {
        max_outbound_connections: CAP,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let origin = format!("http://{}", sink.addr);
    let thousand = OutboundLimits {
        max_requests: 1_000,
        max_connections: 1_000,
        ..OutboundLimits::default()
    };
    let payload = json!({
        "attack": "sockets",
        "count": 1_000,
        "url": format!("{origin}/"),
        "for_ms": 1_500,
    });
    let greedy = support::prepare(&runtime, samples::GREEDY).await;
    let baseline = open_fds_but_the_sinks(sink.addr);
    let runs: Vec<_> = (0..4)
        .map(|n| {
            let (greedy, sandbox) = (greedy.clone(), granted(&origin, thousand));
            let task = task("greedy", n, &payload);
            tokio::spawn(async move { run(&greedy, task, sandbox).await })
        })
        .collect();
    // The most descriptors, and connections to the sink, held while the
    // executions hold their sockets. Connections are counted as the kernel
    // sees them, not as the sink accepted them: a request of one execution
    // may reach its permit only after another execution has ended and
    // closed its connections (thousands of requests take a while to set up
    // on a busy machine), which is within the bound.
    let (mut most, mut most_connected) = (baseline, 0);
    while !runs.iter().all(tokio::task::JoinHandle::is_finished) {
        most = most.max(open_fds_but_the_sinks(sink.addr));
        most_connected = most_connected.max(connected_to(sink.addr));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut refused = 0;
    for run in runs {
        let execution = run.await.unwrap();
        output(&execution);
        refused += refused_by_the_executor(&execution);
    }
    // Each connection is one descriptor of the executions' (the sink's side
    // is not counted).
    println!("{most} descriptors at the peak, {baseline} before, {most_connected} connections");
    assert!(
        most <= baseline + CAP + 64,
        "{most} descriptors open at the peak, {baseline} before"
    );
    assert!(
        most_connected <= CAP,
        "{most_connected} connections open at once"
    );
    assert!(refused > 0, "no execution's log says why it was refused");

    // Once the executions' connections are closed, lambdas connect again.
    let deadline = Instant::now() + Duration::from_secs(10);
    while sink.ended() < sink.accepted() {
        assert!(
            Instant::now() < deadline,
            "the connections outlived their executions"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let server = HttpServer::start(|_| Reply::status(200, "after")).await;
    let payload = json!({"url": server.url(), "body": {}});
    let sandbox = granted(&server.url(), OutboundLimits::default());
    let webhook = support::prepare(&runtime, samples::WEBHOOK).await;
    let execution = run(&webhook, task("webhook", 9, &payload), sandbox).await;
    assert_eq!(output(&execution)["body"], "after");
}
