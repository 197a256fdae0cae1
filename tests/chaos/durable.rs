//! Durable lambdas under the same faults: tasks of `durable` (the sample)
//! that POST three times, 0.1 to 1.6 s apart (a wait past the executor's
//! `suspend_after`, 1 s, suspends the task between two posts), to a real HTTP server
//! on loopback and schedule two children each, among the executor kills,
//! HSC cuts and Postgres crashes of the soak.
//!
//! The server numbers every request it receives (its receipt) and answers
//! with that number; a trigger on the store's `journal` table keeps every
//! entry ever written, so the test knows which answers became durable
//! whatever later writes replaced. Its checks:
//! - **no request repeated once answered**: a request (by its
//!   `Idempotency-Key`) may reach the server again only while no answer of
//!   it has been journaled — a request in flight at a fault, repeated with
//!   the same key; once a receipt's answer is in the journal, no later
//!   receipt of that key exists;
//! - **an answer is durable before the lambda sees it**: when a task's
//!   next request reaches the server, the answer its lambda saw to the one
//!   before (that request's latest receipt) is already in the journal;
//! - every request was made, and each task's output shows its key's last
//!   receipt (the attempt that succeeded was answered from the journal);
//! - each task scheduled exactly its two children, under the ids its
//!   output names, and they ended; it waited for them (a fan-in) and its
//!   output shows both succeeded;
//! - no execution diverged, and some were suspended in their waits.
//!
//! The soak's own checks (ended, every success ran, no overlap, no stale
//! result) cover these tasks and their children too.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::{PgPool, Row};
use waft_core::machine;
use waft_sample_artifacts as samples;
use waft_services::{ClientApi, RunAt, TaskRequest};
use waft_store::AttemptOutcome;
use waft_testing::http::{HttpServer, Reply};

use crate::support::Cluster;

/// Durable tasks scheduled (each with two children).
const EACH: usize = 40;
/// POSTs per task.
const POSTS: usize = 3;
/// Children per task.
const CHILDREN: usize = 2;
/// The call an outbound request is journaled under.
const HTTP_CALL: &str = "wasi:http/outgoing-handler.handle";

/// Every journal entry ever written, kept by a trigger: the store keeps
/// only the newest journal of a task.
const HISTORY: &[&str] = &[
    "CREATE TABLE journal_history (task_id TEXT, seq BIGINT, call TEXT, answer BYTEA, \
     at_us BIGINT)",
    "CREATE FUNCTION journal_history() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
     INSERT INTO journal_history VALUES (NEW.task_id, NEW.seq, NEW.call, NEW.answer, \
     (extract(epoch FROM clock_timestamp()) * 1000000)::bigint); \
     RETURN NULL; END $$",
    "CREATE TRIGGER journal_history AFTER INSERT ON journal \
     FOR EACH ROW EXECUTE FUNCTION journal_history()",
];

/// A request as the server received it.
#[derive(Clone)]
struct Receipt {
    /// Its `Idempotency-Key`: `waft-{task}-{rank}`.
    key: String,
    serial: u64,
    /// When it arrived (µs since the epoch).
    at_us: i64,
}

pub struct Durable {
    _server: HttpServer,
    receipts: Arc<Mutex<Vec<Receipt>>>,
    /// The parent tasks' ids.
    tasks: Vec<String>,
}

impl Durable {
    /// Starts the server and the journal's history, deploys `durable` and
    /// schedules its tasks, due over the next `spread`.
    pub async fn start(cluster: &Cluster, pool: &PgPool, seed: u64, spread: Duration) -> Self {
        for statement in HISTORY {
            sqlx::raw_sql(sqlx::AssertSqlSafe(*statement))
                .execute(pool)
                .await
                .unwrap();
        }
        let receipts = Arc::new(Mutex::new(Vec::<Receipt>::new()));
        let kept = receipts.clone();
        let server = HttpServer::start(move |request| {
            let mut receipts = kept.lock().unwrap();
            let serial = receipts.len() as u64;
            receipts.push(Receipt {
                key: request.header("idempotency-key").unwrap_or("").to_owned(),
                serial,
                at_us: now_us(),
            });
            Reply::status(200, &format!("receipt {serial}."))
        })
        .await;
        let url = server.url();
        cluster
            .deploy("durable", samples::DURABLE, |c| {
                c.max_attempts = 1_000;
                c.grants.outbound = vec![url.parse().unwrap()];
                c.grants.env.insert("REGION".into(), "eu-west-1".into());
            })
            .await;
        let mut rng = fastrand::Rng::with_seed(seed ^ 0xd0_7a_b1_e5);
        let start = now_ms();
        let requests: Vec<TaskRequest> = (0..EACH)
            .map(|i| TaskRequest {
                lambda: "durable".into(),
                payload: serde_json::json!({
                    "url": url,
                    "posts": POSTS,
                    "children": CHILDREN,
                    "gather": true,
                    "step_ms": rng.u64(100..1_600),
                })
                .to_string()
                .into_bytes(),
                run_at: RunAt::At(start + rng.i64(0..spread.as_millis() as i64)),
                idempotency_key: Some(format!("durable-{i}")),
                ..TaskRequest::default()
            })
            .collect();
        let inserted = loop {
            match cluster.frontend.task_schedule_many(requests.clone()).await {
                Ok(inserted) => break inserted,
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        };
        Self {
            _server: server,
            receipts,
            tasks: inserted.into_iter().map(|t| t.id).collect(),
        }
    }

    /// Durable tasks (children too) not yet ended; `None` while the store
    /// cannot answer.
    pub async fn unfinished(pool: &PgPool) -> Option<i64> {
        let statement = format!(
            "SELECT count(*) FROM tasks WHERE lambda = 'durable' AND status IN {}",
            machine::UNFINISHED.sql()
        );
        sqlx::query_scalar(sqlx::AssertSqlSafe(statement))
            .fetch_one(pool)
            .await
            .ok()
    }

    /// Every durable task's id, children included: the soak's own checks
    /// apply to them.
    pub async fn ids(pool: &PgPool) -> Vec<String> {
        sqlx::query_scalar("SELECT id FROM tasks WHERE lambda = 'durable'")
            .fetch_all(pool)
            .await
            .unwrap()
    }

    /// The checks above.
    pub async fn check(&self, pool: &PgPool) -> Vec<String> {
        let mut violations = Vec::new();
        let receipts = self.receipts.lock().unwrap().clone();
        let key_of: HashMap<u64, &str> = receipts.iter().map(|r| (r.serial, &*r.key)).collect();
        let mut last: HashMap<&str, u64> = HashMap::new();
        for receipt in receipts.iter() {
            last.insert(&receipt.key, receipt.serial);
        }

        // When each receipt's answer was first journaled.
        let mut journaled_at: HashMap<u64, i64> = HashMap::new();
        let journaled =
            sqlx::query("SELECT task_id, seq, answer, at_us FROM journal_history WHERE call = $1")
                .bind(HTTP_CALL)
                .fetch_all(pool)
                .await
                .unwrap();
        for row in &journaled {
            let answer: Vec<u8> = row.get("answer");
            // A hole (a request in flight at a write) has no answer.
            let Some(serial) = serial_in(&answer) else {
                continue;
            };
            let at: i64 = row.get("at_us");
            journaled_at
                .entry(serial)
                .and_modify(|first| *first = at.min(*first))
                .or_insert(at);
            let Some(key) = key_of.get(&serial) else {
                violations.push(format!(
                    "{}: journal entry {} holds receipt {serial}, which the server never gave",
                    row.get::<String, _>("task_id"),
                    row.get::<i64, _>("seq"),
                ));
                continue;
            };
            if last[key] != serial {
                violations.push(format!(
                    "{}: request {key} reached the server again (receipt {}) after its answer \
                     (receipt {serial}) was journaled",
                    row.get::<String, _>("task_id"),
                    last[key]
                ));
            }
        }

        let unkeyed = receipts.iter().filter(|r| r.key.is_empty()).count();
        if unkeyed > 0 {
            violations.push(format!(
                "{unkeyed} requests came without an Idempotency-Key"
            ));
        }
        for id in &self.tasks {
            for rank in 1..POSTS {
                let of = |rank: usize| {
                    let key = format!("waft-{id}-{rank}");
                    receipts.iter().filter(move |r| r.key == key)
                };
                for next in of(rank) {
                    let Some(seen) = of(rank - 1).rfind(|r| r.serial < next.serial) else {
                        violations.push(format!(
                            "{id}: request {rank} (receipt {}) before any request {}",
                            next.serial,
                            rank - 1
                        ));
                        continue;
                    };
                    if journaled_at
                        .get(&seen.serial)
                        .is_none_or(|&at| at > next.at_us)
                    {
                        violations.push(format!(
                            "{id}: request {rank} (receipt {}) reached the server before the answer \
                             to request {} (receipt {}) was journaled",
                            next.serial,
                            rank - 1,
                            seen.serial
                        ));
                    }
                }
            }
            let row = sqlx::query("SELECT status, output FROM tasks WHERE id = $1")
                .bind(id)
                .fetch_one(pool)
                .await
                .unwrap();
            let status: String = row.get("status");
            let output: Option<Vec<u8>> = row.get("output");
            let Some(output) = output.filter(|_| status == "success") else {
                continue; // the soak's checks report it
            };
            let output: serde_json::Value = serde_json::from_slice(&output).unwrap();
            for rank in 0..POSTS {
                let key = format!("waft-{id}-{rank}");
                let shown = output["answers"][rank]
                    .as_str()
                    .and_then(|a| serial_in(a.as_bytes()));
                match last.get(key.as_str()) {
                    None => violations.push(format!("{id}: request {key} never made")),
                    Some(&newest) if shown != Some(newest) => violations.push(format!(
                        "{id}: its output shows receipt {shown:?} of {key}, the server's last is {newest}"
                    )),
                    Some(_) => {}
                }
            }
            let named: Vec<&str> = output["children"]
                .as_array()
                .map(|a| a.iter().filter_map(|c| c.as_str()).collect())
                .unwrap_or_default();
            let mut children: Vec<String> =
                sqlx::query_scalar("SELECT id FROM tasks WHERE parent_id = $1")
                    .bind(id)
                    .fetch_all(pool)
                    .await
                    .unwrap();
            children.sort();
            let mut named_sorted: Vec<String> = named.iter().map(|c| c.to_string()).collect();
            named_sorted.sort();
            if children.len() != CHILDREN || children != named_sorted {
                violations.push(format!(
                    "{id}: children {children:?} in the store, {named:?} in its output"
                ));
            }
            if output["gathered"] != serde_json::Value::from(vec!["Success"; CHILDREN]) {
                violations.push(format!(
                    "{id}: gathered {} from its children, not {CHILDREN} successes",
                    output["gathered"]
                ));
            }
        }

        let diverged: Vec<String> = sqlx::query_scalar(
            "SELECT a.task_id FROM attempts a JOIN tasks t ON t.id = a.task_id \
             WHERE t.lambda = 'durable' AND a.error LIKE '%diverged%'",
        )
        .fetch_all(pool)
        .await
        .unwrap();
        for id in diverged {
            violations.push(format!("{id}: an execution diverged"));
        }
        let suspended: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM attempts a JOIN tasks t ON t.id = a.task_id \
             WHERE t.lambda = 'durable' AND a.outcome = $1",
        )
        .bind(AttemptOutcome::Suspended.as_str())
        .fetch_one(pool)
        .await
        .unwrap();
        if suspended == 0 {
            violations.push("no durable task was suspended: every wait was waited in place".into());
        }
        violations
    }

    /// What the durable tasks did, for the summary.
    pub fn summary(&self) -> String {
        let receipts = self.receipts.lock().unwrap();
        let keys: std::collections::HashSet<&str> = receipts.iter().map(|r| &*r.key).collect();
        format!(
            "durable: {} tasks, {} requests received for {} keys ({} repeated while in flight)",
            self.tasks.len(),
            receipts.len(),
            keys.len(),
            receipts.len() - keys.len()
        )
    }
}

/// The receipt number in an answer (`receipt N.`), wherever it lies in
/// the bytes.
fn serial_in(bytes: &[u8]) -> Option<u64> {
    const MARK: &[u8] = b"receipt ";
    let at = bytes.windows(MARK.len()).position(|w| w == MARK)? + MARK.len();
    let digits: Vec<u8> = bytes[at..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .copied()
        .collect();
    std::str::from_utf8(&digits).ok()?.parse().ok()
}

fn now_ms() -> i64 {
    now_us() / 1_000
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}
