//! The `Run` that drives a backend beside the reference model: it fixes each
//! operation's inputs (a journal write's entries included), runs the
//! operation on the backend and on the model with the same inputs, and
//! learns the ids of the tasks the backend made.
//! `run_sequence` is one generated sequence from set-up to the last
//! comparison; races are handed to `race.rs`, comparisons to `compare.rs`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::Duration;

use waft_core::machine;
use waft_core::{LambdaConfig, TaskStatus};
use waft_store::{
    Cron, CronMaterialize, DeadRedrive, DeadSelector, GateSet, Heartbeat, JournalEntry,
    JournalPart, JournalWrite, LEASE_STEP, LambdaDeploy, Materialized, Millis, NewTask, Refusal,
    ResultOutcome, StoreError, TaskClaimMany, TaskEnqueueReady, TaskHeartbeatMany, TaskInsertMany,
    TaskJournalWrite, TaskResult, TaskSetResultMany, TaskSignal, TaskStore, Wait, lease_counter,
};

use crate::OPERATIONS;
use crate::ops::{
    COLLECTIONS, CRON_PERIOD, DEBOUNCE, JournalChange, KEYS, LAMBDAS, MAX_TASKS, Op, SIGNALS, Step,
    T0, Token, Turn,
};
use crate::race::run_race;

// Each operation as the backend runs it.
#[path = "run/store.rs"]
mod store;
use crate::reference::{
    CENTURY, CLAIM_TIMEOUT, CancelAnswer, ClaimAnswer, ENQUEUE_TIMEOUT, Ending, HEARTBEAT_TIMEOUT,
    Hole, MAX_ATTEMPTS, Model, PollAnswer, RedriveAnswer, SignalAnswer, Unwritten, key_fairness,
    key_limit, key_rate,
};

/// An answer of any operation, comparable with the model's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Inserted,
    Advanced,
    Poll(PollAnswer),
    Claim(ClaimAnswer),
    Heartbeat(Result<(), Refusal>),
    Journal(Result<Result<(), Refusal>, Unwritten>),
    Result(Result<Result<TaskStatus, Refusal>, Hole>),
    Cancel(CancelAnswer),
    Signal(SignalAnswer),
    Gate(u64),
    Redrive(RedriveAnswer),
    Deployed(u32),
    Recovered(u64),
    Materialized(bool),
    Skipped,
}

/// The sequence's state beside the model: the clock and the tasks' ids.
pub struct Run<'a> {
    pub store: &'a dyn TaskStore,
    pub model: Model,
    pub now: Millis,
    pub ids: Vec<String>,
    /// The lease the backend gave each task last. Its low half is random,
    /// so the model counts claims (`lease_counter`) and the backend is sent
    /// the lease it gave.
    pub leases: Mutex<HashMap<String, i64>>,
}

impl Run<'_> {
    fn task(&self, index: usize) -> Option<String> {
        (!self.ids.is_empty()).then(|| self.ids[index % self.ids.len()].clone())
    }

    /// Task `index`; for an even index, the first task from it on in one of
    /// `statuses` if one is, so that claims and results meet the tasks they
    /// can change often enough to matter (odd ones still meet any).
    fn task_in(&self, index: usize, statuses: machine::StatusSet) -> Option<String> {
        let n = self.ids.len();
        if index % 2 == 1 || n == 0 {
            return self.task(index);
        }
        (0..n)
            .map(|k| &self.ids[(index + k) % n])
            .find(|id| statuses.contains(self.model.tasks[*id].status))
            .cloned()
            .or_else(|| self.task(index))
    }

    /// The token or lease an operation carries, read off the model (which
    /// equals the backend's, as the comparisons check).
    fn token(&self, id: &str, which: Token, enqueue: bool) -> i64 {
        let task = &self.model.tasks[id];
        let current = if enqueue {
            task.enqueue_token
        } else {
            task.lease_token
        };
        match which {
            Token::Current => current,
            Token::Stale => current - 1,
        }
    }

    /// The write a journal change makes to task `id`'s journal as the
    /// model holds it now: entries whose text and bytes hold what is
    /// awkward to store (NUL, backslashes, bytes that are no UTF-8), and
    /// differ by the lease that writes them.
    fn journal_write(&self, id: &str, lease: i64, change: JournalChange) -> JournalWrite {
        let task = &self.model.tasks[id];
        let len = task.journal.len() as u32;
        let from = if change.hole {
            len + 1
        } else {
            len.saturating_sub(change.back)
        };
        let entries = (from..from + change.entries)
            .map(|seq| JournalEntry {
                seq,
                call: format!("waft:test/calls.n{seq}\0\\"),
                digest: vec![seq as u8, 0, 0xff],
                answer: vec![0, 0xfe, 0xff, lease as u8, seq as u8],
                summary: format!("lease {lease} é🦀\0\\0"),
                outside: seq % 2 == 1,
                attempt: task.attempt,
                at: self.now,
                took_us: u64::from(seq) * 7,
            })
            .collect();
        JournalWrite { from, entries }
    }

    /// The lease to send the backend for the model's lease `lease` of task
    /// `id`: the one it gave if `lease` is the current one, else one from
    /// the same claim as `lease` (which the backend must refuse).
    fn backend_lease(&self, id: &str, lease: i64) -> i64 {
        let given = self.leases.lock().unwrap().get(id).copied();
        match given {
            Some(given) if lease_counter(given) == lease => given,
            _ => lease * LEASE_STEP,
        }
    }

    /// The inputs of an operation, fixed before it runs (so a race's
    /// operations and every serial order of them use the same ones).
    pub fn input(&mut self, op: &Op) -> Input {
        match op {
            Op::Insert {
                lambda,
                collection,
                delay,
                parent,
                key,
                debounce,
            } => {
                if self.ids.len() >= MAX_TASKS {
                    return Input::Nothing;
                }
                Input::Insert(Box::new(NewTask {
                    lambda: LAMBDAS[*lambda].into(),
                    collection: Some(COLLECTIONS[*collection].into()),
                    payload: b"\0".to_vec(),
                    run_at: (!debounce).then_some(self.now + delay),
                    debounce: debounce.then_some(Duration::from_millis(DEBOUNCE as u64)),
                    // A debounced task has no parent.
                    parent_id: parent
                        .filter(|_| !debounce)
                        .and_then(|parent| self.task(parent)),
                    key: key.map(|key| KEYS[key].into()),
                    ..NewTask::default()
                }))
            }
            Op::Claim(task, which) => {
                match self.task_in(*task, machine::StatusSet::of(&[TaskStatus::Enqueued])) {
                    Some(id) => {
                        let token = self.token(&id, *which, true);
                        Input::Task(id, token)
                    }
                    None => Input::Nothing,
                }
            }
            Op::Heartbeat(task, which) => match self.task(*task) {
                Some(id) => {
                    let lease = self.token(&id, *which, false);
                    Input::Task(id, lease)
                }
                None => Input::Nothing,
            },
            Op::Journal(task, which, change, turn) => match self.task(*task) {
                Some(id) => {
                    let lease = self.token(&id, *which, false);
                    let task = &self.model.tasks[&id];
                    let taken = task.journal_taken;
                    let after = match turn {
                        Turn::Next => Some(taken),
                        Turn::Again => Some(taken.saturating_sub(1)),
                        Turn::Late => Some(taken.saturating_sub(2)),
                        Turn::Ahead => Some(taken + 1),
                        Turn::Unnamed => None,
                    };
                    // The version the lease was claimed with, as an
                    // executor says (a stale one says the same).
                    let version = task
                        .claimed_version
                        .unwrap_or(self.model.versions[&task.lambda]);
                    let write = self.journal_write(&id, lease, *change);
                    Input::Journal {
                        id,
                        lease,
                        version,
                        write,
                        after,
                    }
                }
                None => Input::Nothing,
            },
            Op::Result(task, which, _, change) => match self.task_in(*task, machine::RUNNING) {
                Some(id) => {
                    let lease = self.token(&id, *which, false);
                    let journal = change.map(|change| self.journal_write(&id, lease, change));
                    let replayed = self.model.tasks[&id].journal.len() as u32;
                    let children = self.model.children(&id);
                    Input::Result {
                        id,
                        lease,
                        journal,
                        replayed,
                        children,
                    }
                }
                None => Input::Nothing,
            },
            Op::Signal { task, name } => self.signal_input(*task, *name),
            Op::Cancel(task) | Op::Redrive { task, .. } => match self.task(*task) {
                Some(id) => Input::Task(id, 0),
                None => Input::Nothing,
            },
            Op::Materialize { lambda, stale } => {
                let next = self.model.crons[&format!("cron-{}", LAMBDAS[*lambda])];
                Input::Cron(if *stale { next - CRON_PERIOD } else { next })
            }
            Op::Advance(_) | Op::Poll | Op::Gate { .. } | Op::Deploy(_) | Op::Recover => {
                Input::Other
            }
        }
    }

    /// A signal's task and name: with no name, a task suspended waiting
    /// for a signal and that signal (else task `task` and the first name),
    /// so that sequences wake waiting tasks often enough to matter.
    fn signal_input(&self, task: usize, name: Option<usize>) -> Input {
        if let Some(name) = name {
            return match self.task(task) {
                Some(id) => Input::Signal(id, SIGNALS[name]),
                None => Input::Nothing,
            };
        }
        let waiting = self.model.tasks.iter().find_map(|(id, t)| {
            let name = t.waiting_for.as_deref()?;
            let name = SIGNALS.into_iter().find(|s| *s == name)?;
            (t.status == TaskStatus::Suspended).then(|| (id.clone(), name))
        });
        match waiting {
            Some((id, name)) => Input::Signal(id, name),
            None => self.signal_input(task, Some(0)),
        }
    }

    /// Runs an operation on the model; `created` is the id the backend gave
    /// a task this operation made.
    pub fn apply_model(
        model: &mut Model,
        now: Millis,
        op: &Op,
        input: &Input,
        created: &mut Vec<String>,
    ) -> Answer {
        match (op, input) {
            (_, Input::Nothing) => Answer::Skipped,
            (Op::Insert { .. }, Input::Insert(task)) => {
                let window = task.debounce.map(|w| w.as_millis() as Millis);
                if let (Some(window), Some(key)) = (window, &task.key)
                    && let Some(into) = model.debounced(&task.lambda, key)
                {
                    model.collapse(&into, task.collection.as_deref().unwrap(), now, window);
                    crate::COLLAPSED.fetch_add(1, Ordering::Relaxed);
                    return Answer::Inserted;
                }
                let id = created.remove(0);
                model.insert(
                    id,
                    &task.lambda,
                    task.collection.as_deref().unwrap(),
                    task.run_at.unwrap_or(now + window.unwrap_or(0)),
                    task.parent_id.clone(),
                    task.key.clone(),
                    window.is_some(),
                    now,
                );
                Answer::Inserted
            }
            (Op::Advance(_), _) => Answer::Advanced,
            (Op::Poll, Input::PollSkipping(skip)) => Answer::Poll(model.poll_skipping(now, skip)),
            (Op::Poll, _) => Answer::Poll(model.poll(now)),
            (Op::Claim(..), Input::Task(id, token)) => Answer::Claim(model.claim(id, *token, now)),
            (Op::Heartbeat(..), Input::Task(id, lease)) => {
                Answer::Heartbeat(model.heartbeat(id, *lease, now))
            }
            (
                Op::Journal(..),
                Input::Journal {
                    id,
                    lease,
                    version,
                    write,
                    after,
                },
            ) => Answer::Journal(model.journal_message(id, *lease, *version, write, *after, now)),
            (
                Op::Result(_, _, ending, _),
                Input::Result {
                    id,
                    lease,
                    journal,
                    replayed,
                    ..
                },
            ) => {
                Answer::Result(model.result(id, *lease, *ending, journal.as_ref(), *replayed, now))
            }
            (Op::Cancel(_), Input::Task(id, _)) => Answer::Cancel(model.cancel(id, now)),
            (Op::Signal { .. }, Input::Signal(id, name)) => {
                Answer::Signal(model.signal(id, name, now))
            }
            (
                Op::Gate {
                    lambda,
                    collection,
                    state,
                },
                _,
            ) => Answer::Gate(model.gate_set(
                LAMBDAS[*lambda],
                collection.map(|c| COLLECTIONS[c]),
                *state,
                now,
            )),
            (Op::Redrive { fresh, .. }, Input::Task(id, _)) => {
                Answer::Redrive(model.redrive(id, *fresh, now))
            }
            (Op::Deploy(lambda), _) => Answer::Deployed(model.deploy(LAMBDAS[*lambda], T0)),
            (Op::Recover, _) => Answer::Recovered(model.recover(now)),
            (Op::Materialize { lambda, .. }, Input::Cron(expected)) => {
                let schedule = format!("cron-{}", LAMBDAS[*lambda]);
                let next = model.crons[&schedule];
                let id = (next == *expected).then(|| created.remove(0));
                Answer::Materialized(model.materialize(
                    &schedule,
                    *expected,
                    CRON_PERIOD,
                    id,
                    LAMBDAS[*lambda],
                ))
            }
            other => unreachable!("{other:?}"),
        }
    }
}

/// The inputs an operation was run with.
#[derive(Debug, Clone)]
pub enum Input {
    Insert(Box<NewTask>),
    /// A task's id and the token or lease given.
    Task(String, i64),
    /// A journal write: the task, the lease and version it is written
    /// under, the write, and the turn it names among its lease's writes.
    Journal {
        id: String,
        lease: i64,
        version: u32,
        write: JournalWrite,
        after: Option<u32>,
    },
    /// A result's task and lease, the journal write it carries and the
    /// entries it says it replayed.
    Result {
        id: String,
        lease: i64,
        journal: Option<JournalWrite>,
        replayed: u32,
        /// The task's children, which a wait for them lists.
        children: Vec<String>,
    },
    /// A signal's task and name.
    Signal(String, &'static str),
    /// A poll racing signals or journal writes, which leaves their tasks
    /// alone (see `race.rs`).
    PollSkipping(Vec<String>),
    /// A schedule's expected next occurrence.
    Cron(Millis),
    Other,
    /// The operation had nothing to act on (no task yet, or enough).
    Nothing,
}

/// A deploy of `lambda`, the same each time but for the version it makes.
fn deploy_params(lambda: &str) -> LambdaDeploy {
    LambdaDeploy {
        name: lambda.into(),
        digest: format!("digest-{lambda}"),
        component: vec![1],
        artifact: None,
        config: LambdaConfig {
            max_attempts: MAX_ATTEMPTS,
            key_concurrency: key_limit(lambda),
            key_rate: key_rate(lambda),
            key_fairness: key_fairness(lambda),
            ..LambdaConfig::default()
        },
        now: T0,
    }
}

async fn setup(store: &dyn TaskStore) -> Model {
    let mut model = Model::default();
    for lambda in LAMBDAS {
        store.lambda_deploy(deploy_params(lambda)).await.unwrap();
        model.versions.insert(lambda.into(), 1);
        let id = format!("cron-{lambda}");
        store
            .cron_create(Cron {
                id: id.clone(),
                lambda: lambda.into(),
                cron: "* * * * *".into(),
                timezone: "UTC".into(),
                payload: vec![],
                collection: None,
                key: None,
                priority: None,
                catch_up: true,
                next_at: T0,
                created_at: T0,
            })
            .await
            .unwrap();
        model.crons.insert(id, T0);
    }
    model
}

/// Runs one generated sequence against a fresh store.
pub async fn run_sequence(store: &dyn TaskStore, steps: &[Step]) {
    let mut run = Run {
        store,
        model: setup(store).await,
        now: T0,
        ids: Vec::new(),
        leases: Mutex::default(),
    };
    for (index, step) in steps.iter().enumerate() {
        let context = format!("after step {index}: {step:?}");
        match step {
            Step::One(op) => {
                if let Op::Advance(by) = op {
                    run.now += by;
                }
                let input = run.input(op);
                let answer = run.apply_store(op, &input).await;
                let mut created = created_ids(store, &run, op, &input).await;
                let before = created.clone();
                let expected = Run::apply_model(&mut run.model, run.now, op, &input, &mut created);
                assert_eq!(answer, expected, "{context}");
                for id in before {
                    if run.model.tasks.contains_key(&id) && !run.ids.contains(&id) {
                        run.ids.push(id);
                    }
                }
                OPERATIONS.fetch_add(1, Ordering::Relaxed);
            }
            Step::Race(ops) => run_race(&mut run, ops, &context).await,
        }
        run.compare(&context).await;
    }
    run.compare_history().await;
}

/// Ids of the tasks an operation created, in creation order.
async fn created_ids(store: &dyn TaskStore, run: &Run<'_>, op: &Op, input: &Input) -> Vec<String> {
    match (op, input) {
        (Op::Insert { .. }, Input::Insert(_)) | (Op::Materialize { .. }, _) => {
            new_task_ids(store, run).await
        }
        _ => Vec::new(),
    }
}

/// Every task the backend has that the run does not know yet, by id
/// (creation) order.
pub async fn new_task_ids(store: &dyn TaskStore, run: &Run<'_>) -> Vec<String> {
    let all = store
        .task_list(waft_store::TaskList {
            limit: 1000,
            ..Default::default()
        })
        .await
        .unwrap();
    all.into_iter()
        .map(|t| t.id)
        .filter(|id| !run.model.tasks.contains_key(id))
        .collect()
}

/// A refusal as the model words it: a lease by its claim's count.
fn counted(refusal: Refusal) -> Refusal {
    match refusal {
        Refusal::StaleLease { current } => Refusal::StaleLease {
            current: lease_counter(current),
        },
        other => other,
    }
}
