//! The operator beside the faults: gates paused and resumed, a collection
//! dropped, tasks cancelled, dead letters redriven, and a lambda that
//! writes NUL bytes into its log and its errors — the paths a crash soak
//! alone never takes.
//!
//! Its tasks are few and spread over the run's first seconds, so the
//! operator's acts meet tasks that wait, run and retry:
//! - `gated` (sleepy), paused for 0.5–2 s at a time and resumed;
//! - `doomed` (sleepy): collection `drop` is dropped once, collection
//!   `default` has random tasks cancelled;
//! - `flaky` (2 attempts), whose note holds a NUL byte: half succeed on
//!   their second attempt, half die and are redriven (and die again).
//!
//! Its checks, on the store's attempts (each with its claim time) and the
//! executors' journals, with a margin for the clocks of the roles:
//! - no execution of a gated task was claimed while its gate was paused, or
//!   started then unless claimed before the pause (already executing);
//! - no task of the dropped collection was claimed after the drop;
//! - no cancelled task was claimed after its cancel;
//! - no task ran again after it ended, but after a redrive of a dead one;
//! - every operator task ended as its kind allows, and a NUL byte came
//!   back intact in an error.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::{PgPool, Row};
use waft_api::FrontendClient;
use waft_core::machine;
use waft_sample_artifacts as samples;
use waft_services::{ClientApi, RunAt, TaskRequest};
use waft_store::{DeadSelector, GateState};

use crate::support::{Cluster, Run};

/// Allowance for the roles' clocks against this process's: each follows
/// the store's clock within a round trip.
const MARGIN_MS: i64 = 100;
/// Tasks of each operator kind.
const EACH: usize = 60;
/// The note the flaky tasks log and fail with.
const NOTE: &str = " (note: a\u{0}b)";

/// An operator act, dealt into the chaos driver's deck.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Act {
    PauseGate,
    DropCollection,
    Cancel,
    Redrive,
}

impl Act {
    pub const ALL: [Act; 4] = [
        Act::PauseGate,
        Act::DropCollection,
        Act::Cancel,
        Act::Redrive,
    ];

    pub fn kind(self) -> &'static str {
        match self {
            Act::PauseGate => "pause and resume a gate",
            Act::DropCollection => "drop a collection",
            Act::Cancel => "cancel tasks",
            Act::Redrive => "redrive dead tasks",
        }
    }
}

/// What the operator did, and when (Unix ms, this process's clock).
pub struct Operator {
    rng: fastrand::Rng,
    frontend: FrontendClient,
    /// Ids of the operator's tasks, by lambda and collection.
    tasks: Vec<(String, &'static str, &'static str)>,
    /// Each pause: from just after it was set to just before the resume.
    pauses: Vec<(i64, i64)>,
    dropped_at: Option<i64>,
    cancelled: HashMap<String, i64>,
    /// Each redrive that found dead tasks, and how many.
    redrives: Vec<(i64, u64)>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

impl Operator {
    /// Deploys the operator's lambdas and schedules its tasks, due over the
    /// next `spread`.
    pub async fn start(cluster: &Cluster, seed: u64, spread: Duration) -> Self {
        cluster
            .deploy("gated", samples::SLEEPY, |c| c.max_attempts = 1_000)
            .await;
        cluster
            .deploy("doomed", samples::SLEEPY, |c| c.max_attempts = 1_000)
            .await;
        cluster
            .deploy("flaky", samples::FLAKY, |c| c.max_attempts = 2)
            .await;
        let mut rng = fastrand::Rng::with_seed(seed ^ 0x0e7a_70b5);
        let start = now_ms();
        let mut requests = Vec::new();
        let mut kinds = Vec::new();
        let mut add = |lambda: &'static str, collection: &'static str, payload: String| {
            requests.push(TaskRequest {
                lambda: lambda.into(),
                collection: Some(collection.into()),
                payload: payload.into_bytes(),
                run_at: RunAt::At(start + rng.i64(0..spread.as_millis() as i64)),
                idempotency_key: Some(format!("operator-{}", requests.len())),
                ..TaskRequest::default()
            });
            kinds.push((lambda, collection));
        };
        let sleepy = r#"{"steps": 2, "step_ms": 20}"#;
        for i in 0..EACH {
            add("gated", "default", sleepy.into());
            add("doomed", "drop", sleepy.into());
            add("doomed", "default", sleepy.into());
            let succeed_on = if i % 2 == 0 { 2 } else { 5 };
            let payload = serde_json::json!({
                "succeed_on": succeed_on,
                "retry_after_ms": 10,
                "note": NOTE,
            });
            add("flaky", "default", payload.to_string());
        }
        let inserted = loop {
            match cluster.frontend.task_schedule_many(requests.clone()).await {
                Ok(inserted) => break inserted,
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        };
        let tasks = inserted
            .into_iter()
            .zip(kinds)
            .map(|(task, (lambda, collection))| (task.id, lambda, collection))
            .collect();
        Self {
            rng: fastrand::Rng::with_seed(seed),
            frontend: cluster.frontend.clone(),
            tasks,
            pauses: Vec::new(),
            dropped_at: None,
            cancelled: HashMap::new(),
            redrives: Vec::new(),
        }
    }

    /// Does `act`. A call the Frontend refuses (it is being killed, or
    /// Postgres is down) is retried: an act must happen to be checked.
    pub async fn act(&mut self, act: Act) {
        match act {
            Act::PauseGate => {
                self.gate("gated", None, GateState::Paused).await;
                let paused = now_ms();
                let hold = self.rng.u64(500..2_000);
                tokio::time::sleep(Duration::from_millis(hold)).await;
                let resuming = now_ms();
                self.gate("gated", None, GateState::Open).await;
                self.pauses.push((paused, resuming));
            }
            Act::DropCollection => {
                self.gate("doomed", Some("drop"), GateState::Dropped).await;
                self.dropped_at.get_or_insert(now_ms());
            }
            Act::Cancel => {
                let candidates: Vec<String> = self
                    .tasks
                    .iter()
                    .filter(|(id, lambda, collection)| {
                        *lambda == "doomed"
                            && *collection == "default"
                            && !self.cancelled.contains_key(id)
                    })
                    .map(|(id, _, _)| id.clone())
                    .collect();
                for _ in 0..5 {
                    let Some(id) = self.rng.choice(&candidates) else {
                        break;
                    };
                    // Refused once it has ended: nothing to check then.
                    if self.frontend.task_cancel(id).await.is_ok() {
                        self.cancelled.insert(id.clone(), now_ms());
                    }
                }
            }
            Act::Redrive => {
                let redriving = now_ms();
                let selector = DeadSelector::Filter {
                    lambda: "flaky".into(),
                    collection: None,
                };
                if let Ok(count @ 1..) = self.frontend.dead_redrive(selector, None, false).await {
                    self.redrives.push((redriving, count));
                }
            }
        }
    }

    async fn gate(&self, lambda: &str, collection: Option<&str>, state: GateState) {
        while self
            .frontend
            .gate_set(lambda, collection, state)
            .await
            .is_err()
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Operator tasks not yet ended; `None` while the store cannot answer.
    pub async fn unfinished(pool: &PgPool) -> Option<i64> {
        let statement = format!(
            "SELECT count(*) FROM tasks WHERE lambda IN ('gated', 'doomed', 'flaky') \
             AND status IN {}",
            machine::UNFINISHED.sql()
        );
        sqlx::query_scalar(sqlx::AssertSqlSafe(statement))
            .fetch_one(pool)
            .await
            .ok()
    }

    /// The checks above; takes the operator tasks' runs out of `runs`.
    pub async fn check(&self, pool: &PgPool, runs: &mut HashMap<String, Vec<Run>>) -> Vec<String> {
        let mut violations = Vec::new();
        let ms = |at: SystemTime| at.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64;
        let mut nul_seen = false;
        for (id, lambda, collection) in &self.tasks {
            let row = sqlx::query("SELECT status, finished_at FROM tasks WHERE id = $1")
                .bind(id)
                .fetch_one(pool)
                .await
                .unwrap();
            let status: String = row.get("status");
            let finished: Option<i64> = row.get("finished_at");
            let claims: Vec<(i64, i64)> = sqlx::query(
                "SELECT lease_token, started_at FROM attempts WHERE task_id = $1 \
                 AND started_at IS NOT NULL ORDER BY started_at",
            )
            .bind(id)
            .fetch_all(pool)
            .await
            .unwrap()
            .into_iter()
            .map(|row| (row.get("lease_token"), row.get("started_at")))
            .collect();
            let claimed_at = |lease: i64| claims.iter().find(|c| c.0 == lease).map(|c| c.1);
            let task_runs = runs.remove(id).unwrap_or_default();

            let allowed: &[&str] = match (*lambda, *collection) {
                ("gated", _) => &["success"],
                ("doomed", "drop") => &["success", "dropped"],
                ("doomed", _) => &["success", "cancelled"],
                _ => &["success", "dead"],
            };
            if !allowed.contains(&status.as_str()) {
                violations.push(format!("{id} ({lambda}/{collection}): ended {status}"));
            }
            if *lambda == "gated" {
                for &(paused, resuming) in &self.pauses {
                    let inside = |t: i64| t > paused + MARGIN_MS && t < resuming - MARGIN_MS;
                    for &(lease, at) in &claims {
                        if inside(at) {
                            violations.push(format!(
                                "{id}: lease {lease} claimed at {at} while paused ({paused}–{resuming})"
                            ));
                        }
                    }
                    for run in &task_runs {
                        let claimed = claimed_at(run.lease);
                        if inside(ms(run.start)) && claimed.is_none_or(|c| c > paused) {
                            violations.push(format!(
                                "{id}: lease {} started while paused ({paused}–{resuming}), claimed {claimed:?}",
                                run.lease
                            ));
                        }
                    }
                }
            }
            let cut = match (*lambda, *collection) {
                ("doomed", "drop") => self.dropped_at,
                _ => self.cancelled.get(id).copied(),
            };
            if let Some(cut) = cut {
                for &(lease, at) in claims.iter().filter(|c| c.1 > cut + MARGIN_MS) {
                    violations.push(format!("{id}: lease {lease} claimed at {at}, after {cut}"));
                }
            }
            // Ended means ended: no claim after the end but by a redrive.
            if let Some(end) = finished {
                for &(lease, at) in claims.iter().filter(|c| c.1 > end + MARGIN_MS) {
                    violations.push(format!(
                        "{id}: lease {lease} claimed at {at}, after it ended at {end}"
                    ));
                }
            }
            if *lambda == "flaky" {
                // Two attempts a budget: no third claim before a redrive.
                let mut budget_start = i64::MIN;
                let mut in_budget = 0;
                for &(lease, at) in &claims {
                    let since = self.redrives.iter().map(|r| r.0).filter(|r| *r < at).max();
                    if since.unwrap_or(i64::MIN) > budget_start {
                        budget_start = since.unwrap_or(i64::MIN);
                        in_budget = 0;
                    }
                    in_budget += 1;
                    if in_budget > 2 {
                        violations.push(format!(
                            "{id}: lease {lease} is claim {in_budget} of a 2-attempt budget"
                        ));
                    }
                }
                if !nul_seen {
                    nul_seen = self
                        .frontend
                        .task_attempts(id)
                        .await
                        .unwrap()
                        .iter()
                        .any(|a| a.error.as_deref().is_some_and(|e| e.contains(NOTE)));
                }
            }
        }
        if !nul_seen {
            violations.push("no flaky error came back with its NUL byte".into());
        }
        // A redrive may find no dead task yet in a short run; the summary
        // says how many it found.
        for (act, done) in [
            ("pause", !self.pauses.is_empty()),
            ("drop", self.dropped_at.is_some()),
        ] {
            if !done {
                violations.push(format!("the operator never did a {act}"));
            }
        }
        violations
    }

    /// What the operator did, for the summary.
    pub fn summary(&self) -> String {
        format!(
            "operator: {} tasks, {} pauses, drop {}, {} cancelled, {} dead tasks redriven",
            self.tasks.len(),
            self.pauses.len(),
            if self.dropped_at.is_some() {
                "done"
            } else {
                "not done"
            },
            self.cancelled.len(),
            self.redrives.iter().map(|r| r.1).sum::<u64>()
        )
    }
}
