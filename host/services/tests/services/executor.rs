//! The Executor against a Controller that hands its work out late (a slow
//! network, a stalled process): the claim is made when the request arrives,
//! so its first fence counts from the request. A task handed out after
//! that fence is not started — its claim may already have lapsed and gone
//! to another executor — while one handed out in time runs. And an executor
//! cut off from its HSC stops a lambda at the fence, its HTTP request with
//! it. The real Frontend and HSC run over a SQLite file with the samples.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;
use waft_core::model::{Heartbeat, Refusal, TaskResult};
use waft_core::{LambdaConfig, TaskStatus};
use waft_services::{
    ControllerApi, ExecutorConfig, HeartbeatConfig, Hsc, HscApi, NextWork, ServiceResult,
};
use waft_services::{JournalCommit, JournalPage};
use waft_store::{ClaimedTask, JournalEntry, TaskStore};

use crate::support;
use crate::support::{EagerController, Installation};

/// Claims the one queued task as soon as it is asked, and answers `delay`
/// later; empty-handed after that.
struct LateController {
    store: Arc<dyn TaskStore>,
    hsc: Arc<Hsc>,
    delay: Duration,
    handed: AtomicBool,
}

#[async_trait]
impl ControllerApi for LateController {
    async fn next_work(&self, request: NextWork) -> ServiceResult<Vec<ClaimedTask>> {
        if self.handed.swap(true, Ordering::AcqRel) {
            tokio::time::sleep(request.wait).await;
            return Ok(Vec::new());
        }
        let claims = support::enqueue_ready(&*self.store, 1).await.unwrap();
        let claimed = self.hsc.task_claim_many(claims).await?;
        tokio::time::sleep(self.delay).await;
        Ok(claimed.into_iter().filter_map(Result::ok).collect())
    }
}

/// Heartbeats every 400 ms, claims held 3 s: the first fence is 2.2 s, and
/// an instance whose acknowledged heartbeat is older than 2.6 s stops. Short
/// enough to keep the tests quick; a heartbeat may take 400 ms before it
/// counts as failed, so that a busy machine does not fail three in a row
/// and stop an instance no test meant to stop.
fn heartbeat() -> HeartbeatConfig {
    HeartbeatConfig {
        interval: Duration::from_millis(400),
        heartbeat_timeout: Duration::from_secs(3),
        rpc_timeout: Duration::from_millis(400),
    }
}

/// What these tests start an executor with: up to `max_tasks` at once.
fn executor_config(max_tasks: usize) -> ExecutorConfig {
    ExecutorConfig {
        heartbeat: heartbeat(),
        max_tasks,
        next_work_wait: Duration::from_millis(100),
        refresh: Duration::from_millis(100),
        ..ExecutorConfig::default()
    }
}

/// An executor whose one task of `lambda` (the `hello` sample) is handed
/// out `delay` after it was asked for.
struct HandedOut {
    installation: Installation,
    id: String,
    stop: CancellationToken,
    running: tokio::task::JoinHandle<()>,
}

impl HandedOut {
    async fn start(lambda: &str, delay: Duration) -> Self {
        let installation = Installation::with(
            lambda,
            waft_sample_artifacts::HELLO,
            LambdaConfig::default(),
        )
        .await;
        let id = installation
            .insert(lambda, vec![Vec::new()])
            .await
            .remove(0);
        let hsc = installation.hsc(heartbeat());
        let controller = Arc::new(LateController {
            store: installation.store.clone(),
            hsc: hsc.clone(),
            delay,
            handed: AtomicBool::new(false),
        });
        let max_tasks = ExecutorConfig::default().max_tasks;
        let (stop, running) =
            installation.start_executor(controller, hsc, executor_config(max_tasks));
        Self {
            installation,
            id,
            stop,
            running,
        }
    }

    async fn status(&self) -> TaskStatus {
        self.installation
            .store
            .task_get(&self.id)
            .await
            .unwrap()
            .unwrap()
            .status
    }

    async fn stop(self) {
        self.stop.cancel();
        self.running.await.unwrap();
    }
}

/// Generous: the first use of a lambda loads it, which a debug build on a
/// busy machine may take seconds over. A passing test never waits so long.
const WITHIN: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_handed_out_in_time_runs() {
    // Handed out 100 ms into its 2.2 s first fence, it starts, and its
    // heartbeats carry it to the end however long loading and running take.
    let handed = HandedOut::start("hello", Duration::from_millis(100)).await;
    let deadline = Instant::now() + WITHIN;
    let status = loop {
        let status = handed.status().await;
        if status.is_terminal() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "still {status:?} after {WITHIN:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    handed.stop().await;
    assert_eq!(status, TaskStatus::Success);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_handed_out_after_its_first_fence_is_not_started() {
    // Its own lambda: the executor counts a task it refuses to start under
    // its lambda's name, process-wide, and no other test may count there.
    let lambda = "late";
    let handed = HandedOut::start(lambda, Duration::from_secs(3)).await;
    let refused = || {
        waft_services::metrics::metrics()
            .self_terminations
            .get_or_create(&waft_services::metrics::lambda(lambda))
            .get()
    };
    // Wait for the executor to have had the task and refused it, not for a
    // while: on a slow machine the hand-out itself may come late.
    let deadline = Instant::now() + WITHIN;
    while refused() == 0 {
        assert!(
            Instant::now() < deadline,
            "the late task was never refused: {:?}",
            handed.status().await
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Its claim stands until it lapses; no execution began under it.
    assert_eq!(handed.status().await, TaskStatus::Claimed);
    assert_eq!(refused(), 1);
    handed.stop().await;
}

/// An HSC that answers until it is cut off, then never again: what an
/// executor sees when its network to the HSC goes down.
struct Severable {
    hsc: Arc<Hsc>,
    cut: AtomicBool,
}

impl Severable {
    async fn wait_if_cut(&self) {
        if self.cut.load(Ordering::Acquire) {
            std::future::pending::<()>().await;
        }
    }
}

#[async_trait]
impl HscApi for Severable {
    async fn task_claim_many(
        &self,
        claims: Vec<(String, i64)>,
    ) -> ServiceResult<Vec<Result<ClaimedTask, Refusal>>> {
        self.wait_if_cut().await;
        self.hsc.task_claim_many(claims).await
    }

    async fn task_heartbeat_many(
        &self,
        beats: Vec<Heartbeat>,
    ) -> ServiceResult<Vec<Result<(), Refusal>>> {
        self.wait_if_cut().await;
        self.hsc.task_heartbeat_many(beats).await
    }

    async fn task_set_result_many(
        &self,
        results: Vec<TaskResult>,
    ) -> ServiceResult<Vec<Result<TaskStatus, Refusal>>> {
        self.wait_if_cut().await;
        self.hsc.task_set_result_many(results).await
    }

    async fn task_journal_write(
        &self,
        commit: JournalCommit,
    ) -> ServiceResult<Result<(), Refusal>> {
        self.wait_if_cut().await;
        self.hsc.task_journal_write(commit).await
    }

    async fn task_journal_read(
        &self,
        page: JournalPage,
    ) -> ServiceResult<Result<Vec<JournalEntry>, Refusal>> {
        self.wait_if_cut().await;
        self.hsc.task_journal_read(page).await
    }
    async fn task_signal_read(
        &self,
        read: waft_store::TaskSignalRead,
    ) -> ServiceResult<Result<Option<Vec<u8>>, Refusal>> {
        self.hsc.task_signal_read(read).await
    }
    async fn task_children_read(
        &self,
        read: waft_store::TaskChildrenRead,
    ) -> ServiceResult<Result<waft_store::ChildrenState, Refusal>> {
        self.hsc.task_children_read(read).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lambda_cut_off_from_the_hsc_loses_its_request_at_the_fence() {
    use waft_testing::http::{HttpServer, Reply};

    // A server that answers forever: the request ends only if Waft ends it.
    let server = HttpServer::start(|_| Reply::Stream {
        chunk: b"tick".to_vec(),
        every: Duration::from_millis(50),
        count: None,
    })
    .await;
    let mut config = LambdaConfig::default();
    config.grants.outbound = vec![server.url().parse().unwrap()];
    config.limits.timeout = Duration::from_secs(30);
    let installation = Installation::with("webhook", waft_sample_artifacts::WEBHOOK, config).await;
    let payload = serde_json::json!({ "url": format!("{}/stream", server.url()) });
    let id = installation
        .insert("webhook", vec![payload.to_string().into_bytes()])
        .await
        .remove(0);
    let real = installation.hsc(heartbeat());
    let hsc = Arc::new(Severable {
        hsc: real.clone(),
        cut: AtomicBool::new(false),
    });
    let controller = Arc::new(LateController {
        store: installation.store.clone(),
        hsc: real,
        delay: Duration::ZERO,
        handed: AtomicBool::new(false),
    });
    let max_tasks = ExecutorConfig::default().max_tasks;
    let (stop, running) =
        installation.start_executor(controller, hsc.clone(), executor_config(max_tasks));

    let deadline = Instant::now() + WITHIN;
    while server.requests().is_empty() {
        if Instant::now() >= deadline {
            let task = installation.store.task_get(&id).await.unwrap();
            panic!("the request never arrived: {task:#?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A heartbeat is answered (the task is processing), then the HSC is
    // cut off.
    while installation
        .store
        .task_get(&id)
        .await
        .unwrap()
        .unwrap()
        .status
        != TaskStatus::Processing
    {
        assert!(Instant::now() < deadline, "no heartbeat was answered");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        server
            .connections()
            .iter()
            .all(|c| c.dropped_early.is_none())
    );
    let cut_at = Instant::now();
    hsc.cut.store(true, Ordering::Release);

    // Three heartbeats fail (1.6 s with these settings) or the fence passes
    // (2.6 s after the last answered one was sent): the instance stops and
    // the server sees the drop.
    // Only the watchdog ends it this side of the lambda's 30 s timeout; a
    // third of that leaves a busy machine room to tear the instance down,
    // and how soon the drop comes is printed, not asserted.
    let deadline = cut_at + Duration::from_secs(10);
    let dropped = loop {
        if let Some(at) = server.connections().iter().find_map(|c| c.dropped_early) {
            break at;
        }
        assert!(Instant::now() < deadline, "the request outlived the fence");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    eprintln!(
        "request dropped {:?} after the HSC was cut off (fence 2.6 s)",
        dropped.duration_since(cut_at)
    );
    // And no request starts after the stop.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(server.requests().len(), 1, "a request after the stop");
    stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(5), running).await;
}

/// Counts the HSC's heartbeat calls and the beats they carry.
struct CountingHsc {
    hsc: Arc<Hsc>,
    calls: std::sync::atomic::AtomicUsize,
    beats: std::sync::atomic::AtomicUsize,
}

#[async_trait]
impl HscApi for CountingHsc {
    async fn task_claim_many(
        &self,
        claims: Vec<(String, i64)>,
    ) -> ServiceResult<Vec<Result<ClaimedTask, Refusal>>> {
        self.hsc.task_claim_many(claims).await
    }

    async fn task_heartbeat_many(
        &self,
        beats: Vec<Heartbeat>,
    ) -> ServiceResult<Vec<Result<(), Refusal>>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.beats.fetch_add(beats.len(), Ordering::Relaxed);
        self.hsc.task_heartbeat_many(beats).await
    }

    async fn task_set_result_many(
        &self,
        results: Vec<TaskResult>,
    ) -> ServiceResult<Vec<Result<TaskStatus, Refusal>>> {
        self.hsc.task_set_result_many(results).await
    }

    async fn task_journal_write(
        &self,
        commit: JournalCommit,
    ) -> ServiceResult<Result<(), Refusal>> {
        self.hsc.task_journal_write(commit).await
    }

    async fn task_journal_read(
        &self,
        page: JournalPage,
    ) -> ServiceResult<Result<Vec<JournalEntry>, Refusal>> {
        self.hsc.task_journal_read(page).await
    }
    async fn task_signal_read(
        &self,
        read: waft_store::TaskSignalRead,
    ) -> ServiceResult<Result<Option<Vec<u8>>, Refusal>> {
        self.hsc.task_signal_read(read).await
    }
    async fn task_children_read(
        &self,
        read: waft_store::TaskChildrenRead,
    ) -> ServiceResult<Result<waft_store::ChildrenState, Refusal>> {
        self.hsc.task_children_read(read).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_tasks_share_their_heartbeat_calls() {
    let config = LambdaConfig {
        concurrency: 200,
        ..LambdaConfig::default()
    };
    let installation = Installation::with("sleepy", waft_sample_artifacts::SLEEPY, config).await;
    // 200 tasks of 3 s each, all running at once: ≈ 7 beats each.
    let payload = serde_json::json!({ "steps": 30, "step_ms": 100 }).to_string();
    installation
        .insert("sleepy", vec![payload.into_bytes(); 200])
        .await;
    let real = installation.hsc(heartbeat());
    let hsc = Arc::new(CountingHsc {
        hsc: real.clone(),
        calls: std::sync::atomic::AtomicUsize::new(0),
        beats: std::sync::atomic::AtomicUsize::new(0),
    });
    let controller = Arc::new(EagerController {
        store: installation.store.clone(),
        hsc: real,
    });
    let (stop, running) =
        installation.start_executor(controller, hsc.clone(), executor_config(200));
    let store = &installation.store;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let tasks = store
            .task_list(waft_store::TaskList {
                lambda: Some("sleepy".into()),
                limit: 1000,
                ..waft_store::TaskList::default()
            })
            .await
            .unwrap();
        if tasks.iter().all(|t| t.status.is_terminal()) {
            assert!(
                tasks.iter().all(|t| t.status == TaskStatus::Success),
                "{:?}",
                tasks.iter().find(|t| t.status != TaskStatus::Success)
            );
            break;
        }
        assert!(Instant::now() < deadline, "the tasks did not finish");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.cancel();
    running.await.unwrap();
    let calls = hsc.calls.load(Ordering::Relaxed);
    let beats = hsc.beats.load(Ordering::Relaxed);
    println!("{beats} heartbeats in {calls} HSC calls");
    assert!(beats >= 1000, "{beats} beats");
    // One call per beat without batching; a window of a quarter of the
    // RPC timeout (100 ms here) gathers them by the dozen.
    assert!(calls * 5 <= beats, "{beats} beats in {calls} calls");
}
