//! Checks that start `waft` processes of their own: refused
//! configurations, TLS, a restart after downtime, and one after a kill.

use std::io::BufRead;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use waft_sample_artifacts as samples;
use waft_services::{ClientApi, CronRequest};
use waft_store::{Task, TaskList};

use crate::support::Cluster;

/// How long anything here may take on a busy machine before it fails.
const WITHIN: Duration = Duration::from_secs(60);

/// A child process, killed when dropped: a failed assertion must not leave
/// it running after the test.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn serve_refuses_an_incomplete_or_unsafe_configuration_before_binding() {
    let run = |role: &str, env: &[(&str, &str)]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_waft"))
            .args(["serve", role])
            .env("WAFT_LISTEN", "127.0.0.1:1")
            .envs(env.iter().copied())
            .output()
            .unwrap()
    };
    let output = run("executor", &[]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("WAFT_PEERS_FRONTEND"), "{stderr}");

    let output = run(
        "hsc",
        &[
            ("WAFT_STORE_URL", "postgres://nowhere/db"),
            ("WAFT_HEARTBEAT_INTERVAL", "4s"),
        ],
    );
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("3 × heartbeat interval"), "{stderr}");
}

/// After downtime, a schedule with catch-up runs every occurrence it
/// missed, and one without runs none but the latest (`waft dev`, killed
/// for four seconds and started again).
pub async fn missed_occurrences_are_caught_up_or_skipped_after_downtime() {
    let mut cluster = Cluster::dev().await;
    cluster.deploy("tick", samples::HELLO, |_| {}).await;
    for (collection, catch_up) in [("caught", true), ("skipped", false)] {
        let request = CronRequest {
            lambda: "tick".into(),
            cron: "* * * * * *".into(),
            collection: Some(collection.into()),
            catch_up,
            ..CronRequest::default()
        };
        cluster.frontend.cron_create(request).await.unwrap();
    }
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    };
    let ticks = async |cluster: &Cluster| {
        let all = TaskList {
            lambda: Some("tick".into()),
            limit: 1000,
            ..TaskList::default()
        };
        cluster.frontend.task_list(all).await.unwrap()
    };
    // Both schedules run before the downtime.
    until(&cluster, "both schedules made a task", async || {
        let tasks = ticks(&cluster).await;
        ["caught", "skipped"]
            .iter()
            .all(|c| tasks.iter().any(|t| t.collection == *c))
    })
    .await;
    cluster.process("dev").kill();
    let down = now();
    // The downtime itself, not a wait for something: seconds must pass.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let up = now();
    cluster.process("dev").restart();
    cluster.ready().await;
    // Each schedule moves on oldest occurrence first: once both have one
    // past the restart, the downtime's are all made (or skipped).
    until(
        &cluster,
        "both schedules ran on after the restart",
        async || {
            let tasks = ticks(&cluster).await;
            ["caught", "skipped"].iter().all(|c| {
                tasks
                    .iter()
                    .any(|t| t.collection == *c && t.scheduled_at >= up)
            })
        },
    )
    .await;
    let tasks = ticks(&cluster).await;

    // Occurrences well inside the downtime: a turn may have made the first
    // one ahead, and the restart's own second is not missed. Every whole
    // second between is one occurrence (`* * * * * *`, whole seconds).
    let (from, to) = (down + 1000, up - 1000);
    let missed: Vec<i64> = (from / 1000 + 1..=(to - 1) / 1000)
        .map(|second| second * 1000)
        .collect();
    assert!(!missed.is_empty(), "downtime too short to test");
    let in_gap = |collection: &str| {
        let mut at: Vec<i64> = tasks
            .iter()
            .filter(|t| t.collection == collection && t.scheduled_at > from && t.scheduled_at < to)
            .map(|t| t.scheduled_at)
            .collect();
        at.sort_unstable();
        at
    };
    assert_eq!(in_gap("caught"), missed, "{}", summary(&tasks));
    assert_eq!(in_gap("skipped"), Vec::<i64>::new(), "{}", summary(&tasks));
}

/// Killed while it runs one task and holds two on its queue, `waft dev`
/// started again runs all three at once: the running one's execution is
/// counted as a lost attempt, the queued ones run on their first, and none
/// waits for the timeouts a shared store would wait for (a minute here).
/// Meanwhile a second `waft dev` on the same data directory is refused.
pub async fn a_restarted_dev_recovers_its_tasks_at_once() {
    let minute = "60s".to_owned();
    let mut cluster = Cluster::dev_on_with(
        None,
        |_| {},
        vec![
            ("WAFT_HEARTBEAT_TIMEOUT".into(), minute.clone()),
            ("WAFT_CONSUMER_ENQUEUE_TIMEOUT".into(), minute),
            ("WAFT_EXECUTOR_MAX_TASKS".into(), "1".into()),
        ],
    )
    .await;
    cluster.deploy("sleepy", samples::SLEEPY, |_| {}).await;
    let plan = serde_json::json!({"steps": 30, "step_ms": 100});
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(cluster.schedule("sleepy", plan.clone(), None).await);
    }
    let running = until_one_runs(&cluster, &ids).await;

    // Refused at once; one that started instead is killed when dropped.
    let second = std::process::Command::new(env!("CARGO_BIN_EXE_waft"))
        .args(["dev", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(cluster.data_dir())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut second = KillOnDrop(second);
    let deadline = Instant::now() + WITHIN;
    let status = loop {
        if let Some(status) = second.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "a second waft dev runs on the data directory"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut second.0.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("in use by another process (pid "),
        "{stderr}"
    );

    cluster.process("dev").kill();
    cluster.process("dev").restart();
    let restarted = Instant::now();
    cluster.ready().await;
    for id in &ids {
        let task = cluster.finished(id, WITHIN).await;
        let attempts = if *id == running { 2 } else { 1 };
        assert_eq!(
            (task.status, task.attempt),
            (waft_core::TaskStatus::Success, attempts),
            "{task:#?}"
        );
    }
    // Three runs of 3 s one after another, not a minute's timeout first.
    let took = restarted.elapsed();
    assert!(took < Duration::from_secs(40), "recovered in {took:?}");
}

/// The first of `ids` to be running.
async fn until_one_runs(cluster: &Cluster, ids: &[String]) -> String {
    let deadline = Instant::now() + WITHIN;
    loop {
        for id in ids {
            let task = cluster.frontend.task_get(id).await.unwrap();
            if task.status == waft_core::TaskStatus::Processing {
                return id.clone();
            }
        }
        assert!(Instant::now() < deadline, "no task ran");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `done` holds, failing after [`WITHIN`] with `what`.
async fn until(cluster: &Cluster, what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + WITHIN;
    while !done().await {
        assert!(
            Instant::now() < deadline,
            "not within {WITHIN:?}: {what}\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Each task's collection and occurrence, for failure messages.
fn summary(tasks: &[Task]) -> String {
    tasks
        .iter()
        .map(|t| format!("{} {}\n", t.collection, t.scheduled_at))
        .collect()
}

/// With a certificate configured the gRPC port speaks TLS: a client that
/// trusts the certificate gets through; a plaintext client, or one that
/// trusts another certificate, does not.
pub fn tls_when_a_certificate_is_configured() {
    use std::process::{Command, Stdio};
    let dir = tempfile::TempDir::new().unwrap();
    let issue = |name: &str| {
        let issued = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
        let cert = dir.path().join(format!("{name}.pem"));
        std::fs::write(&cert, issued.cert.pem()).unwrap();
        let key = dir.path().join(format!("{name}.key"));
        std::fs::write(&key, issued.signing_key.serialize_pem()).unwrap();
        (cert.display().to_string(), key.display().to_string())
    };
    let (cert, key) = issue("server");
    let (other, _) = issue("other");
    let data = dir.path().join("data").display().to_string();
    let log = dir.path().join("dev.log");
    // Port 0: the server takes a free port and says which. A port found
    // free beforehand may be someone else's by the time it binds.
    let dev = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_waft"))
            .args(["dev", "--data-dir", &data, "--listen", "127.0.0.1:0"])
            .env("WAFT_TLS_CERT", &cert)
            .env("WAFT_TLS_KEY", &key)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let (_dev, addr) = listening_on(dev, &log);
    let list = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_waft"))
            .args(["lambda", "list", "--server", &addr])
            .args(extra)
            .env_remove("WAFT_CA")
            .output()
            .unwrap()
    };
    let deadline = Instant::now() + WITHIN;
    loop {
        let trusted = list(&["--ca", &cert]);
        if trusted.status.success() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{}",
            String::from_utf8_lossy(&trusted.stderr)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(list(&[]).status.code(), Some(6), "plaintext got through");
    assert_eq!(
        list(&["--ca", &other]).status.code(),
        Some(6),
        "an untrusted certificate was accepted"
    );
}

/// Where a `waft dev` process says it listens, with the process (still
/// owned, so still killed on drop). Its output is read to the end
/// meanwhile: a process whose pipe closed would fail its next `println!`.
fn listening_on(mut dev: KillOnDrop, log: &Path) -> (KillOnDrop, String) {
    let stdout = dev.0.stdout.take().expect("stdout piped");
    let (said, heard) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(rest) = line.strip_prefix("waft dev: listening on ") {
                let addr = rest.split_whitespace().next().unwrap_or_default();
                let _ = said.send(addr.to_owned());
            }
        }
    });
    // Disconnected at once if it exits before saying.
    match heard.recv_timeout(WITHIN) {
        Ok(addr) => (dev, addr),
        Err(error) => panic!(
            "waft dev did not say where it listens ({error}):\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        ),
    }
}
