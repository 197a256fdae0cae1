//! What crosses between Waft's processes, over the real gRPC servers of
//! `waft-api` and the clients of `waft-client`: the HSC and the Controller
//! served on one port, an Executor, the Store Consumer and the Frontend
//! beside them on a SQLite file. Every batch that crosses a process is cut
//! by bytes as well as by count, so one tenant's large results or payloads
//! never break a batch that carries another's; an item too large for any
//! batch fails alone, with a reason; and a request over the limit says so
//! (`waft-client`'s tests have the other transport failures).

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;
use waft_client::{ControllerClient, HscClient};
use waft_core::model::{Heartbeat, Refusal, ResultOutcome, TaskResult};
use waft_core::{ByteSize, LambdaConfig, ServiceError, TaskStatus};
use waft_queue::MemoryQueue;
use waft_runtime::Runtime;
use waft_services::secrets::SecretKey;
use waft_services::{
    ClientApi, Clock, ConsumerConfig, Controller, ControllerApi, ControllerConfig, Executor,
    ExecutorConfig, Fills, Frontend, HeartbeatConfig, Hsc, HscApi, LambdaSlots, NextWork, RunAt,
    ServiceResult, StoreConsumer, SystemClock, TaskRequest,
};
use waft_services::{JournalCommit, JournalPage};
use waft_store::{ClaimedTask, JournalEntry, Task, TaskStore};

use crate::support;

/// Generous: loading a lambda in a debug build on a busy machine may take
/// many seconds. A passing test never waits so long.
const WITHIN: Duration = Duration::from_secs(120);

/// Every role of an installation in this process, the HSC and the
/// Controller behind their gRPC servers.
struct Cluster {
    _dir: tempfile::TempDir,
    store: Arc<dyn TaskStore>,
    runtime: Arc<Runtime>,
    key: Arc<SecretKey>,
    frontend: Arc<Frontend>,
    /// Where the HSC and the Controller listen.
    address: String,
    stop: CancellationToken,
}

impl Cluster {
    async fn start() -> Self {
        let dir = tempfile::TempDir::new().unwrap();
        let store = support::sqlite_store(&dir).await;
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let runtime = Arc::new(support::on_demand_runtime());
        let key = Arc::new(SecretKey::read_or_create(&dir.path().join("key")).unwrap());
        let queue = Arc::new(MemoryQueue::new(Duration::from_secs(30)));
        let fills = Fills::default();
        let consumer = StoreConsumer::new(
            store.clone(),
            queue.clone(),
            clock.clone(),
            ConsumerConfig {
                poll_interval: Duration::from_millis(100),
                ..ConsumerConfig::default()
            },
        )
        .fills(Arc::new(fills.clone()));
        let frontend = Arc::new(
            Frontend::new(
                store.clone(),
                clock.clone(),
                runtime.clone(),
                Arc::new(consumer.waker()),
            )
            .fills(fills)
            .secrets(key.clone()),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let hsc = Arc::new(Hsc::new(store.clone(), clock.clone(), heartbeat()));
        let controller = Controller::new(
            queue,
            Arc::new(HscClient::new(waft_client::channel(&address).unwrap())),
            frontend.clone(),
            ControllerConfig {
                receive_wait: Duration::from_millis(100),
                refresh: Duration::from_millis(100),
                ..ControllerConfig::default()
            },
        );
        let stop = CancellationToken::new();
        let roles = waft_api::Roles {
            hsc: Some(hsc),
            controller: Some(Arc::new(controller.clone())),
            ..waft_api::Roles::default()
        };
        tokio::spawn(waft_api::serve(
            listener,
            roles,
            stop.clone().cancelled_owned(),
        ));
        let until = stop.clone();
        tokio::spawn(async move { controller.run(until.cancelled_owned()).await });
        let until = stop.clone();
        tokio::spawn(async move { consumer.run(until.cancelled_owned()).await });
        Self {
            _dir: dir,
            store,
            runtime,
            key,
            frontend,
            address,
            stop,
        }
    }

    fn hsc_client(&self) -> HscClient {
        HscClient::new(waft_client::channel(&self.address).unwrap())
    }

    /// Deploys the `greedy` sample as `name` through the Frontend.
    async fn deploy(&self, name: &str, config: LambdaConfig) {
        let config = support::granted(config);
        let greedy = std::fs::read(waft_sample_artifacts::GREEDY).unwrap();
        self.frontend
            .lambda_deploy(name, greedy, config)
            .await
            .unwrap();
    }

    /// Deploys `greedy` as `name`, then widens its version's `limit` (a
    /// column: `max_output`, `max_payload`) in the database to `bytes`: a
    /// version stored under an earlier, wider bound, which no deploy makes
    /// today.
    async fn deploy_widened(&self, name: &str, limit: &str, bytes: ByteSize) {
        self.deploy(name, LambdaConfig::default()).await;
        let database = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(self._dir.path().join(support::DATABASE));
        let pool = sqlx::SqlitePool::connect_with(database).await.unwrap();
        let statement = match limit {
            "max_output" => "UPDATE lambda_versions SET max_output = $1 WHERE lambda = $2",
            "max_payload" => "UPDATE lambda_versions SET max_payload = $1 WHERE lambda = $2",
            other => panic!("no limit {other}"),
        };
        sqlx::query(statement)
            .bind(bytes.bytes() as i64)
            .bind(name)
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
    }

    /// Schedules one task of `lambda` per payload through the Frontend.
    async fn schedule(&self, lambda: &str, payloads: Vec<Vec<u8>>) -> Vec<String> {
        let requests = payloads
            .into_iter()
            .map(|payload| TaskRequest {
                lambda: lambda.into(),
                payload,
                run_at: RunAt::Now,
                ..TaskRequest::default()
            })
            .collect();
        let inserted = self.frontend.task_schedule_many(requests).await.unwrap();
        inserted.into_iter().map(|task| task.id).collect()
    }

    /// Starts an executor taking work from the Controller over gRPC and
    /// reporting to `hsc`.
    fn executor(&self, hsc: Arc<dyn HscApi>) -> Arc<Executor> {
        let controller = ControllerClient::new(waft_client::channel(&self.address).unwrap());
        let executor = Executor::new(
            self.runtime.clone(),
            Arc::new(controller),
            hsc,
            self.frontend.clone(),
            ExecutorConfig {
                heartbeat: heartbeat(),
                max_tasks: 64,
                next_work_wait: Duration::from_millis(200),
                refresh: Duration::from_millis(100),
                ..ExecutorConfig::default()
            },
            Some(self.key.clone()),
        )
        .unwrap();
        tokio::spawn(executor.clone().run(self.stop.clone().cancelled_owned()));
        executor
    }

    async fn tasks(&self, ids: &[String]) -> Vec<Task> {
        let mut tasks = Vec::with_capacity(ids.len());
        for id in ids {
            tasks.push(self.store.task_get(id).await.unwrap().unwrap());
        }
        tasks
    }

    /// Waits until every task of `ids` has ended; returns them.
    async fn ended(&self, ids: &[String]) -> Vec<Task> {
        let deadline = Instant::now() + WITHIN;
        loop {
            let tasks = self.tasks(ids).await;
            if tasks.iter().all(|t| t.status.is_terminal()) {
                return tasks;
            }
            if Instant::now() >= deadline {
                let open: Vec<_> = tasks
                    .iter()
                    .filter(|t| !t.status.is_terminal())
                    .map(|t| (&t.lambda, t.status, t.attempt, &t.last_error))
                    .collect();
                panic!("tasks still open after {WITHIN:?}: {open:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The defaults, with a lease of a minute: a test here holds every result
/// until all its tasks have run, and a result held past its task's lease is
/// given up and the task run again. On a loaded machine (other tests in
/// this process included) the last task may end well over the default
/// lease after the first.
fn heartbeat() -> HeartbeatConfig {
    HeartbeatConfig {
        heartbeat_timeout: Duration::from_secs(60),
        ..HeartbeatConfig::default()
    }
}

/// `greedy`'s payload for an output of `bytes` bytes.
fn output_of(bytes: usize) -> Vec<u8> {
    serde_json::json!({ "attack": "output", "bytes": bytes })
        .to_string()
        .into_bytes()
}

/// The HSC over gRPC, holding its first `set_results` call until released:
/// the results of every task that ends meanwhile queue up behind it and
/// leave together, as they do when many tasks end at once.
struct HeldResults {
    hsc: HscClient,
    release: CancellationToken,
}

#[async_trait]
impl HscApi for HeldResults {
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
        self.hsc.task_heartbeat_many(beats).await
    }

    async fn task_set_result_many(
        &self,
        results: Vec<TaskResult>,
    ) -> ServiceResult<Vec<Result<TaskStatus, Refusal>>> {
        self.release.cancelled().await;
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
async fn results_are_cut_by_bytes_and_one_too_large_fails_alone() {
    let cluster = Cluster::start().await;
    cluster
        .deploy(
            "bulky",
            LambdaConfig {
                concurrency: 32,
                ..LambdaConfig::default()
            },
        )
        .await;
    cluster
        .deploy_widened("legacy", "max_output", ByteSize::mib(17))
        .await;
    // Twenty outputs of 1 MiB (the default limit) and one of 17 MiB: more
    // than one internal message carries, in one batch if cut by count.
    let mut ids = cluster
        .schedule("bulky", vec![output_of(1 << 20); 20])
        .await;
    let huge = cluster.schedule("legacy", vec![output_of(17 << 20)]).await;
    ids.extend(huge.iter().cloned());

    let release = CancellationToken::new();
    let hsc = Arc::new(HeldResults {
        hsc: cluster.hsc_client(),
        release: release.clone(),
    });
    let executor = cluster.executor(hsc);
    // Every task ran and none is running: their results wait to leave.
    let deadline = Instant::now() + WITHIN;
    loop {
        let tasks = cluster.tasks(&ids).await;
        let ran = tasks
            .iter()
            .all(|t| matches!(t.status, TaskStatus::Claimed | TaskStatus::Processing));
        if ran && executor.running() == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the tasks did not all run");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    release.cancel();

    let tasks = cluster.ended(&ids).await;
    for task in tasks.iter().filter(|t| t.lambda == "bulky") {
        assert_eq!(
            (
                task.status,
                task.attempt,
                task.output.as_ref().map(Vec::len)
            ),
            (TaskStatus::Success, 1, Some(1 << 20)),
            "{}: {:?}",
            task.id,
            task.last_error
        );
    }
    let huge = tasks.iter().find(|t| t.lambda == "legacy").unwrap();
    let error = huge.last_error.clone().unwrap_or_default();
    assert_eq!(
        (huge.status, huge.attempt),
        (TaskStatus::FatalFailure, 1),
        "{error}"
    );
    assert!(
        error.contains(&(17 << 20).to_string()) && error.contains("carr"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_at_the_largest_allowed_is_claimed_and_run() {
    let cluster = Cluster::start().await;
    let config = LambdaConfig {
        max_payload: LambdaConfig::MAX_PAYLOAD,
        ..LambdaConfig::default()
    };
    cluster.deploy("big", config).await;
    // `greedy` ignores fields it does not know: a pad fills the payload to
    // the largest any lambda may accept.
    let head = br#"{"attack":"output","bytes":0,"pad":""#;
    let size = LambdaConfig::MAX_PAYLOAD.as_usize();
    let mut payload = head.to_vec();
    payload.resize(size - 2, b'p');
    payload.extend_from_slice(br#""}"#);
    let mut ids = cluster.schedule("big", vec![payload]).await;
    // Small neighbours of the same lambda, handed out beside it.
    ids.extend(cluster.schedule("big", vec![output_of(1); 8]).await);
    cluster.executor(Arc::new(cluster.hsc_client()));

    for task in cluster.ended(&ids).await {
        assert_eq!(
            (task.status, task.attempt),
            (TaskStatus::Success, 1),
            "{} of {} bytes: {:?}",
            task.id,
            task.payload.len(),
            task.last_error
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_over_the_limit_says_so_and_not_tls() {
    let cluster = Cluster::start().await;
    let result = TaskResult {
        id: "01M81141G398N4ZV4VMQVXT2M3".into(),
        lease_token: 1,
        outcome: ResultOutcome::Success {
            output: Some(vec![b'o'; 17 << 20]),
        },
        log: None,
        journal: None,
        replayed: 0,
    };
    let error = cluster
        .hsc_client()
        .task_set_result_many(vec![result])
        .await
        .unwrap_err();
    let message = error.to_string();
    assert!(!message.contains("TLS"), "{message}");
    assert!(message.contains("too large"), "{message}");
    assert!(
        matches!(error, ServiceError::ResourceExhausted(_)),
        "{error:?}"
    );
}

#[tokio::test]
async fn what_the_pipeline_cannot_carry_is_refused_up_front() {
    let cluster = Cluster::start().await;
    let mut wide = LambdaConfig::default();
    wide.limits.max_output = ByteSize::mib(16);
    let refused = cluster
        .frontend
        .lambda_deploy(
            "wide",
            std::fs::read(waft_sample_artifacts::GREEDY).unwrap(),
            support::granted(wide),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, ServiceError::InvalidArgument(m) if m.contains("0..=15MiB")),
        "{refused:?}"
    );

    // A version stored under the earlier bound takes payloads of 16 MiB;
    // none could ever be claimed, so none is scheduled.
    cluster
        .deploy_widened("legacy", "max_payload", ByteSize::mib(16))
        .await;
    let payload = vec![b' '; LambdaConfig::MAX_PAYLOAD.as_usize() + 1];
    let request = TaskRequest {
        lambda: "legacy".into(),
        payload: payload.clone(),
        ..TaskRequest::default()
    };
    let refused = cluster
        .frontend
        .task_schedule_many(vec![request])
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, ServiceError::ResourceExhausted(m) if m.contains("15MiB")),
        "{refused:?}"
    );
    let cron = waft_services::CronRequest {
        lambda: "legacy".into(),
        cron: "0 3 * * *".into(),
        payload,
        ..waft_services::CronRequest::default()
    };
    let refused = cluster.frontend.cron_create(cron).await.unwrap_err();
    assert!(
        matches!(&refused, ServiceError::ResourceExhausted(m) if m.contains("15MiB")),
        "{refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_payload_no_answer_carries_fails_its_task_at_the_claim() {
    let cluster = Cluster::start().await;
    cluster
        .deploy_widened("legacy", "max_payload", ByteSize::mib(16))
        .await;
    // Stored before the Frontend's bound, as an earlier release did.
    let inserted = cluster
        .store
        .task_insert_many(waft_store::TaskInsertMany {
            tasks: vec![waft_store::NewTask {
                lambda: "legacy".into(),
                payload: vec![b' '; 16 << 20],
                ..waft_store::NewTask::default()
            }],
            now: SystemClock.now(),
        })
        .await
        .unwrap();
    let id = inserted[0].id.clone();
    // An executor asks the Controller for it over gRPC; the HSC fails it
    // rather than answer what no message carries, and nothing is handed
    // out.
    let controller = ControllerClient::new(waft_client::channel(&cluster.address).unwrap());
    let work = controller
        .next_work(NextWork {
            slots: vec![LambdaSlots {
                lambda: "legacy".into(),
                free: 1,
            }],
            max_tasks: 1,
            wait: Duration::from_secs(3),
        })
        .await;
    assert!(matches!(&work, Ok(tasks) if tasks.is_empty()), "{work:?}");
    cluster.ended(std::slice::from_ref(&id)).await;
    let task = cluster.store.task_get(&id).await.unwrap().unwrap();
    let error = task.last_error.unwrap_or_default();
    assert_eq!(task.status, TaskStatus::FatalFailure, "{error}");
    assert!(error.contains(&(16 << 20).to_string()), "{error}");
}

/// Claims of more than one answer carries — the Controller counts each
/// task at its lambda's `max_payload`, which a task scheduled before that
/// was lowered may exceed — still get an answer that fits one message;
/// what does not fit is not handed out, and comes back after its claim
/// timeout.
#[tokio::test]
async fn the_hscs_answer_to_claims_fits_one_message() {
    let dir = tempfile::TempDir::new().unwrap();
    let store = support::sqlite_store(&dir).await;
    let config = LambdaConfig {
        max_payload: LambdaConfig::MAX_PAYLOAD,
        ..LambdaConfig::default()
    };
    support::store_lambda(&*store, "big", config).await;
    let tasks = (0..3)
        .map(|_| waft_store::NewTask {
            lambda: "big".into(),
            payload: vec![b' '; 6 << 20],
            ..waft_store::NewTask::default()
        })
        .collect();
    store
        .task_insert_many(waft_store::TaskInsertMany {
            tasks,
            now: SystemClock.now(),
        })
        .await
        .unwrap();
    let claims = support::enqueue_ready(&*store, 10).await.unwrap();
    let hsc = Hsc::new(store, Arc::new(SystemClock), heartbeat());
    let answers = hsc.task_claim_many(claims).await.unwrap();
    let handed: Vec<_> = answers.iter().filter_map(|a| a.as_ref().ok()).collect();
    let bytes: usize = handed.iter().map(|task| task.payload.len()).sum();
    assert_eq!(handed.len(), 2, "{bytes} bytes handed out");
    assert_eq!(
        answers[2].as_ref().err(),
        Some(&Refusal::WrongState(TaskStatus::Claimed))
    );
}
