//! Checks that start `waft` processes of their own: refused
//! configurations, TLS, and a restart after downtime.

use std::time::{Duration, Instant};

use waft_sample_artifacts as samples;
use waft_services::{CronRequest, FrontendApi};
use waft_store::TaskList;

use crate::support::Cluster;

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
    tokio::time::sleep(Duration::from_secs(2)).await;
    cluster.process("dev").kill();
    let down = now();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let up = now();
    cluster.process("dev").restart();
    cluster.ready().await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    let all = TaskList {
        lambda: Some("tick".into()),
        limit: 1000,
        ..TaskList::default()
    };
    let tasks = cluster.frontend.task_list(all).await.unwrap();
    // Occurrences well inside the downtime: a turn may have made the first
    // one ahead, and the restart's own second is not missed.
    let (from, to) = (down + 1000, up - 1000);
    let missed = (from / 1000 + 1..=(to - 1) / 1000).count();
    assert!(missed >= 1, "downtime too short to test");
    let in_gap = |collection: &str| {
        tasks
            .iter()
            .filter(|t| t.collection == collection && t.scheduled_at > from && t.scheduled_at < to)
            .count()
    };
    assert_eq!(in_gap("caught"), missed, "{tasks:#?}");
    assert_eq!(in_gap("skipped"), 0, "{tasks:#?}");
    // Both schedules run on after the restart.
    for collection in ["caught", "skipped"] {
        assert!(
            tasks
                .iter()
                .any(|t| t.collection == collection && t.scheduled_at >= up),
            "{collection} stopped"
        );
    }
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
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let data = dir.path().join("data").display().to_string();
    let mut dev = Command::new(env!("CARGO_BIN_EXE_waft"))
        .args(["dev", "--data-dir", &data, "--listen", &addr])
        .env("WAFT_TLS_CERT", &cert)
        .env("WAFT_TLS_KEY", &key)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let list = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_waft"))
            .args(["lambda", "list", "--server", &addr])
            .args(extra)
            .env_remove("WAFT_CA")
            .output()
            .unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
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
    dev.kill().unwrap();
    dev.wait().unwrap();
}
