//! The heartbeat watchdog, on a paused clock: it stops an execution after
//! three failed heartbeats or a lost lease, always before the store could
//! hand the task to someone else, and never stops a healthy one.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;
use waft_runtime::KillSwitch;
use waft_services::{HeartbeatConfig, HeartbeatFailure, HeartbeatSink, WatchEnd, Watched, watch};

fn config() -> HeartbeatConfig {
    HeartbeatConfig {
        interval: Duration::from_secs(2),
        rpc_timeout: Duration::from_secs(1),
        heartbeat_timeout: Duration::from_secs(10),
    }
}

/// Answers each heartbeat from a script: `Ok`, a failure, or `None` for no
/// answer at all; past the script, `Ok`. Records progress notes.
struct Scripted {
    script: Vec<Option<Result<(), HeartbeatFailure>>>,
    calls: AtomicU32,
    progress: Mutex<Vec<Option<String>>>,
}

impl Scripted {
    fn new(script: Vec<Option<Result<(), HeartbeatFailure>>>) -> Arc<Self> {
        Arc::new(Self {
            script,
            calls: AtomicU32::new(0),
            progress: Mutex::default(),
        })
    }
}

#[async_trait]
impl HeartbeatSink for Scripted {
    async fn heartbeat(
        &self,
        _: &str,
        _: i64,
        progress: Option<String>,
    ) -> Result<(), HeartbeatFailure> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst) as usize;
        self.progress.lock().unwrap().push(progress);
        match self.script.get(call) {
            Some(Some(answer)) => answer.clone(),
            Some(None) => std::future::pending().await,
            None => Ok(()),
        }
    }
}

fn unreachable() -> Option<Result<(), HeartbeatFailure>> {
    Some(Err(HeartbeatFailure::Unreachable(
        "connection refused".into(),
    )))
}

#[test]
fn unsafe_settings_are_refused_with_the_reason() {
    config().validate().unwrap();
    let tight = HeartbeatConfig {
        heartbeat_timeout: Duration::from_secs(7),
        ..config()
    };
    let message = tight.validate().unwrap_err().to_string();
    assert!(
        message.contains(
            "3 × heartbeat interval + rpc timeout = 7s must be below the heartbeat timeout (7s)"
        ),
        "{message}"
    );
    let slow = HeartbeatConfig {
        rpc_timeout: Duration::from_secs(3),
        ..config()
    };
    assert!(
        slow.validate()
            .unwrap_err()
            .to_string()
            .contains("must not exceed the heartbeat interval")
    );
    let zero = HeartbeatConfig {
        interval: Duration::ZERO,
        ..config()
    };
    assert!(zero.validate().is_err());
}

#[tokio::test(start_paused = true)]
async fn a_healthy_execution_is_never_stopped() {
    let sink = Scripted::new(vec![]);
    let kill = KillSwitch::new();
    let end = watch(
        sink.clone(),
        Watched {
            task_id: "t",
            lambda: "lambda",
            lease_token: 1,
        },
        config(),
        &kill,
        || Some("busy".into()),
        tokio::time::sleep(Duration::from_secs(61)),
    )
    .await;
    assert_eq!(end, WatchEnd::Finished);
    assert!(!kill.is_killed());
    assert_eq!(
        sink.calls.load(Ordering::SeqCst),
        30,
        "one heartbeat every 2 s for 61 s"
    );
    assert_eq!(sink.progress.lock().unwrap()[0].as_deref(), Some("busy"));
}

#[tokio::test(start_paused = true)]
async fn three_failed_heartbeats_stop_it_before_the_heartbeat_timeout() {
    for failure in [unreachable(), None] {
        // One success, then the HSC is gone (refusing, or silent).
        let sink = Scripted::new(vec![
            Some(Ok(())),
            failure.clone(),
            failure.clone(),
            failure,
        ]);
        let kill = KillSwitch::new();
        let started = Instant::now();
        let end = watch(
            sink.clone(),
            Watched {
                task_id: "t",
                lambda: "lambda",
                lease_token: 1,
            },
            config(),
            &kill,
            || None,
            std::future::pending(),
        )
        .await;
        let last_success = started + config().interval;
        let stopped_after = Instant::now() - last_success;
        assert!(
            matches!(&end, WatchEnd::Stopped(why) if why.starts_with("3 heartbeats in a row failed")),
            "{end:?}"
        );
        assert_eq!(
            kill.reason(),
            Some(match &end {
                WatchEnd::Stopped(why) => why.as_str(),
                _ => "",
            })
        );
        assert!(
            stopped_after <= config().interval * 3 + config().rpc_timeout,
            "stopped {stopped_after:?} after the last good heartbeat"
        );
        assert!(stopped_after < config().heartbeat_timeout);
    }
}

#[tokio::test(start_paused = true)]
async fn a_lost_lease_stops_it_at_once() {
    let sink = Scripted::new(vec![
        Some(Ok(())),
        Some(Err(HeartbeatFailure::LeaseLost(
            "claimed by another executor".into(),
        ))),
    ]);
    let kill = KillSwitch::new();
    let started = Instant::now();
    let end = watch(
        sink,
        Watched {
            task_id: "t",
            lambda: "lambda",
            lease_token: 1,
        },
        config(),
        &kill,
        || None,
        std::future::pending(),
    )
    .await;
    assert_eq!(
        end,
        WatchEnd::Stopped("lease lost: claimed by another executor".into())
    );
    assert_eq!(Instant::now() - started, config().interval * 2);
    assert!(kill.is_killed());
}

#[tokio::test(start_paused = true)]
async fn a_success_between_failures_resets_the_count() {
    let sink = Scripted::new(vec![
        unreachable(),
        unreachable(),
        Some(Ok(())),
        unreachable(),
        unreachable(),
        Some(Ok(())),
    ]);
    let kill = KillSwitch::new();
    let end = watch(
        sink.clone(),
        Watched {
            task_id: "t",
            lambda: "lambda",
            lease_token: 1,
        },
        config(),
        &kill,
        || None,
        tokio::time::sleep(Duration::from_secs(15)),
    )
    .await;
    assert_eq!(end, WatchEnd::Finished);
    assert!(!kill.is_killed());
    assert_eq!(sink.calls.load(Ordering::SeqCst), 7);
}

// On the real clock: the fence is the instance's own, read with
// `std::time::Instant`.
#[tokio::test]
async fn acknowledged_heartbeats_move_the_fence_and_silence_lets_it_pass() {
    let config = HeartbeatConfig {
        interval: Duration::from_millis(50),
        rpc_timeout: Duration::from_millis(20),
        heartbeat_timeout: Duration::from_millis(400),
    };
    config.validate().unwrap();
    let watched = Watched {
        task_id: "t",
        lambda: "lambda",
        lease_token: 1,
    };
    // Answered heartbeats for 600 ms: well past the first fence.
    let kill = KillSwitch::new();
    kill.fence_at(std::time::Instant::now() + config.first_fence());
    let end = watch(
        Scripted::new(vec![]),
        watched,
        config,
        &kill,
        || None,
        tokio::time::sleep(Duration::from_millis(600)),
    )
    .await;
    assert_eq!(end, WatchEnd::Finished);
    assert!(!kill.is_killed(), "{:?}", kill.reason());
    // Then nobody heartbeats (a starved watchdog): the fence passes.
    tokio::time::sleep(config.fence_after_ack()).await;
    assert!(kill.is_killed());
    assert!(
        kill.reason().unwrap().contains("lease may have lapsed"),
        "{:?}",
        kill.reason()
    );
}
