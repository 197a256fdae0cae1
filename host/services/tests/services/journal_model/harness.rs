//! What runs a case against the real runtime, executor, HSC and store:
//! one SQLite installation with the `script` sample deployed, one loopback
//! HTTP server and one executor for a whole run, the cases one after the
//! other, with the faults of `faults.rs` between the executor and the HSC.
//!
//! Everything a case's check needs is recorded on the way: each
//! execution of the task (its claim, its attempt, the journal it started
//! from, its writes, its end) and each request the server received.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use waft_core::{LambdaConfig, TaskStatus};
use waft_services::{ClientApi, ExecutorConfig, HeartbeatConfig, JournalCommit, read_journal};
use waft_store::{DeadSelector, JournalEntry, TaskList};
use waft_testing::http::{HttpServer, Recorded, Reply};

use super::case::{BIG, Case, Fault, Kind};
use super::faults::{Controller, FaultyHsc};
use super::reference::Held;
use crate::support::Installation;

/// The call an outbound request is journaled under.
pub const HTTP_CALL: &str = "wasi:http/outgoing-handler.handle";
/// Heartbeat timing: short, so that a lapsed lease is noticed soon.
pub const HEARTBEAT: HeartbeatConfig = HeartbeatConfig {
    interval: Duration::from_millis(300),
    // Writes of 9 MiB answers take a while in a debug build.
    rpc_timeout: Duration::from_secs(2),
    heartbeat_timeout: Duration::from_secs(8),
};

/// One execution of a case's task.
#[derive(Debug, Clone)]
pub struct Execution {
    pub lease: i64,
    pub attempt: u32,
    /// 0, or 1 after the fresh redrive.
    pub generation: u32,
    /// The journal's HTTP entries when it was claimed.
    pub before: Vec<Held>,
    /// Journal writes the store took from it (a part of a split write
    /// counts alone).
    pub writes: u32,
    /// The previous write it sent, for a late copy.
    pub last_write: Option<JournalCommit>,
    /// Answers (by tag, their receipt) of writes that landed in the store
    /// (a split write lands with its last part).
    pub committed: BTreeMap<String, u32>,
    /// Answers of the parts of a split write the store staged so far: they
    /// land with its last part, or never.
    pub staged: BTreeMap<String, u32>,
    pub killed: bool,
    /// How it ended, as the executor's execution journal says.
    pub outcome: Option<String>,
}

/// A request as the server received it.
#[derive(Debug, Clone)]
pub struct Receipt {
    /// The execution current when it arrived.
    pub execution: usize,
    pub tag: String,
    pub n: u32,
    pub key: Option<String>,
}

/// The case being run, and what it did so far.
pub struct Current {
    pub case: Case,
    pub number: usize,
    pub payload: Vec<u8>,
    /// Its id, once claimed.
    pub task: String,
    pub generation: u32,
    pub executions: Vec<Execution>,
    pub receipts: Vec<Receipt>,
    /// Per tag, receipts so far.
    pub counts: BTreeMap<String, u32>,
    /// Killed leases whose lapse the controller still owes.
    pub lapse: Vec<i64>,
}

/// The state shared by the server, the HSC in between and the test.
#[derive(Default)]
pub struct World {
    pub current: Mutex<Option<Current>>,
    /// Killed executions, by task and lease.
    pub dead: Mutex<BTreeSet<(String, i64)>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl World {
    pub fn with<R>(&self, f: impl FnOnce(&mut Current) -> R) -> Option<R> {
        lock(&self.current).as_mut().map(f)
    }

    pub fn is_dead(&self, task: &str, lease: i64) -> bool {
        lock(&self.dead).contains(&(task.to_owned(), lease))
    }

    /// Kills execution `index` of the current case.
    pub fn kill(&self, current: &mut Current, index: usize) {
        let execution = &mut current.executions[index];
        if !execution.killed {
            execution.killed = true;
            lock(&self.dead).insert((current.task.clone(), execution.lease));
            current.lapse.push(execution.lease);
        }
    }

    /// The server's answer to `request`.
    fn answer(&self, request: &Recorded) -> Reply {
        let mut parts = request.path.trim_start_matches('/').splitn(2, '/');
        let (Some(number), Some(tag)) = (parts.next(), parts.next()) else {
            return Reply::status(400, "no case");
        };
        let tag = tag.to_owned();
        let key = request.header("idempotency-key").map(str::to_owned);
        let reply = self.with(|current| {
            if current.number.to_string() != number || current.executions.is_empty() {
                return None;
            }
            let execution = current.executions.len() - 1;
            let n = current.counts.get(&tag).copied().unwrap_or(0);
            current.counts.insert(tag.clone(), n + 1);
            current.receipts.push(Receipt {
                execution,
                tag: tag.clone(),
                n,
                key,
            });
            if current.case.faults.get(&execution) == Some(&Fault::OnRequest(tag.clone())) {
                self.kill(current, execution);
            }
            let kind = current.case.reply(&tag, n);
            let mut body = format!("tag={tag};n={n};").into_bytes();
            if current.case.big.contains(&tag) {
                body.resize(BIG, b'x');
            }
            let reply = match kind.status() {
                Some(status) => Reply::Answer {
                    status,
                    headers: Vec::new(),
                    body,
                },
                None => Reply::HangUp,
            };
            let delay = current.case.delays.get(&tag).copied().unwrap_or(0);
            Some(if delay > 0 && kind != Kind::HangUp {
                Reply::Delayed {
                    after: Duration::from_millis(delay),
                    reply: Box::new(reply),
                }
            } else {
                reply
            })
        });
        reply
            .flatten()
            .unwrap_or_else(|| Reply::status(410, "no such case"))
    }

    /// The tags and receipts of the answers in `entries`.
    pub fn answers(entries: &[JournalEntry]) -> BTreeMap<String, u32> {
        entries
            .iter()
            .filter(|e| e.call == HTTP_CALL && !e.digest.is_empty())
            .filter_map(|e| marker(&e.answer))
            .collect()
    }
}

/// The tag and receipt an answer's body names (`tag=T;n=N;`).
pub fn marker(answer: &[u8]) -> Option<(String, u32)> {
    let at = answer.windows(4).position(|w| w == b"tag=")?;
    let rest = &answer[at + 4..answer.len().min(at + 64)];
    let text = String::from_utf8_lossy(rest);
    let (tag, rest) = text.split_once(";n=")?;
    let (n, _) = rest.split_once(';')?;
    Some((tag.to_owned(), n.parse().ok()?))
}

/// A journal's HTTP entries, in order.
pub fn held(entries: &[JournalEntry]) -> Vec<Held> {
    entries
        .iter()
        .filter(|e| e.call == HTTP_CALL)
        .map(|e| {
            if e.digest.is_empty() {
                Held::Hole
            } else {
                Held::Answered(marker(&e.answer).map(|(_, n)| n))
            }
        })
        .collect()
}

/// One installation, server and executor for a whole run.
pub struct Bench {
    pub installation: Arc<Installation>,
    pub world: Arc<World>,
    pub server: HttpServer,
    pub executions_file: PathBuf,
    _dir: tempfile::TempDir,
    stop: tokio_util::sync::CancellationToken,
    running: tokio::task::JoinHandle<()>,
    cases: usize,
}

/// What a case's run left, for its check.
pub struct Ran {
    pub current: Current,
    pub status: TaskStatus,
    pub output: Option<Vec<u8>>,
    /// The journal's HTTP entries at the end.
    pub after: Vec<Held>,
    pub children: usize,
}

impl Bench {
    pub async fn start() -> Self {
        let world = Arc::new(World::default());
        let answering = world.clone();
        let server = HttpServer::start(move |request| answering.answer(request)).await;
        let mut config = LambdaConfig {
            // Every case's task: three attempts (a fourth is a redrive's).
            max_attempts: 3,
            allowed_children: vec!["script".into()],
            ..LambdaConfig::default()
        };
        config.backoff.base = Duration::from_millis(10);
        config.backoff.max = Duration::from_millis(10);
        config.grants.outbound = vec![server.url().parse().expect("a grant")];
        let installation =
            Arc::new(Installation::with("script", waft_sample_artifacts::SCRIPT, config).await);
        let dir = tempfile::TempDir::new().expect("a directory");
        let executions_file = dir.path().join("executions.jsonl");
        let client: Arc<dyn ClientApi> = installation.frontend.clone();
        let hsc = Arc::new(FaultyHsc {
            inner: installation.hsc(HEARTBEAT),
            world: world.clone(),
            client,
        });
        let controller = Arc::new(Controller {
            installation: installation.clone(),
            hsc: hsc.clone(),
            world: world.clone(),
            executions_file: executions_file.clone(),
        });
        let (stop, running) = installation.start_executor(
            controller,
            hsc,
            ExecutorConfig {
                heartbeat: HEARTBEAT,
                next_work_wait: Duration::from_millis(50),
                refresh: Duration::from_millis(200),
                journal: Some(executions_file.clone()),
                ..ExecutorConfig::default()
            },
        );
        Self {
            installation,
            world,
            server,
            executions_file,
            _dir: dir,
            stop,
            running,
            cases: 0,
        }
    }

    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.running.await;
    }

    /// Runs `case` to its end (and its redrive's); what it left.
    pub async fn run(&mut self, case: &Case) -> Result<Ran, String> {
        self.cases += 1;
        let number = self.cases;
        let url = format!("{}/{number}", self.server.url());
        let payload = case.payload(&url);
        // The task is known by its payload when it is claimed: its id is
        // not known before it is inserted.
        *lock(&self.world.current) = Some(Current {
            case: case.clone(),
            number,
            payload: payload.clone(),
            task: String::new(),
            generation: 0,
            executions: Vec::new(),
            receipts: Vec::new(),
            counts: BTreeMap::new(),
            lapse: Vec::new(),
        });
        let id = self
            .installation
            .insert("script", vec![payload])
            .await
            .remove(0);
        let mut status = self.ended(&id).await?;
        if status == TaskStatus::Dead && case.redrive {
            self.world.with(|c| c.generation = 1);
            self.installation
                .frontend
                .dead_redrive(DeadSelector::Ids(vec![id.clone()]), None, true)
                .await
                .map_err(|e| format!("the redrive failed: {e}"))?;
            status = self.ended(&id).await?;
        }
        let task = self
            .installation
            .frontend
            .task_get(&id)
            .await
            .map_err(|e| e.to_string())?;
        let journal = self
            .installation
            .frontend
            .task_journal(&id, true)
            .await
            .map_err(|e| e.to_string())?;
        let children = self
            .installation
            .frontend
            .task_list(TaskList {
                parent_id: Some(id.clone()),
                limit: 1000,
                ..TaskList::default()
            })
            .await
            .map_err(|e| e.to_string())?
            .len();
        let mut current = lock(&self.world.current).take().expect("the case");
        let records = read_journal(&self.executions_file).unwrap_or_default();
        for execution in &mut current.executions {
            execution.outcome = records
                .iter()
                .find(|r| {
                    r.task == current.task
                        && r.lease == execution.lease
                        && r.event == waft_services::JournalEvent::End
                })
                .and_then(|r| r.outcome.clone());
        }
        Ok(Ran {
            current,
            status,
            output: task.output,
            after: held(&journal),
            children,
        })
    }

    /// Waits for task `id` to end (at most a minute).
    async fn ended(&self, id: &str) -> Result<TaskStatus, String> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let task = self
                .installation
                .frontend
                .task_get(id)
                .await
                .map_err(|e| e.to_string())?;
            if matches!(
                task.status,
                TaskStatus::Success | TaskStatus::FatalFailure | TaskStatus::Dead
            ) {
                return Ok(task.status);
            }
            if tokio::time::Instant::now() > deadline {
                return Err(format!(
                    "task {id} did not end in a minute: {:?}",
                    task.status
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
