//! The model-based test of the store: random sequences of every
//! `TaskStore` operation of the state table — insert, poll at advancing
//! times (every timeout expiring), claim with current and stale tokens,
//! heartbeat, results of every kind, cancel, gates by lambda and collection,
//! redrive, periodic occurrences — run against each backend and against
//! the reference model (`model/reference.rs`), compared after every step,
//! with the state table's invariants checked on the backend's own state.
//!
//! On Postgres a step may also be a race: two or three operations run at
//! once on separate connections, and the backend's answers and state must
//! equal those of one of their serial orders (they are linearizable). Polls
//! racing each other may split the due tasks between them (`SKIP LOCKED`,
//! as several consumers do); they are matched as one poll doing the work of
//! all.
//!
//! `WAFT_MODEL_CASES` (default 48) sequences per backend, each of up to
//! `WAFT_MODEL_STEPS` (default 40) steps; `WAFT_MODEL_SEED` replays a run.
//! Each prints its operation count, for the long runs in RELIABILITY.md.

#[path = "model/reference.rs"]
mod reference;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use reference::{
    CLAIM_TIMEOUT, CancelAnswer, ClaimAnswer, ENQUEUE_TIMEOUT, Ending, HEARTBEAT_TIMEOUT,
    MAX_ATTEMPTS, Model, PollAnswer, RedriveAnswer,
};
use sqlx::{Connection as _, Executor as _};
use waft_core::{LambdaConfig, TaskStatus, machine};
use waft_store::{
    Cron, CronMaterialize, DeadRedrive, DeadSelector, GateSet, GateState, Heartbeat, LambdaDeploy,
    Materialized, Millis, NewTask, PostgresStore, ResultOutcome, SqliteStore, StoreError,
    TaskClaimMany, TaskEnqueueReady, TaskHeartbeatMany, TaskInsertMany, TaskResult,
    TaskSetResultMany, TaskStore,
};

const T0: Millis = 1_800_000_000_000;
const LAMBDAS: [&str; 2] = ["a", "b"];
const COLLECTIONS: [&str; 2] = ["default", "c"];
const CRON_PERIOD: Millis = 4_000;
/// Tasks a sequence makes at most.
const MAX_TASKS: usize = 8;

/// Which token or lease an operation carries.
#[derive(Debug, Clone, Copy)]
enum Token {
    Current,
    Stale,
}

/// One operation. Tasks are named by their index in creation order (modulo
/// how many exist), so a generated sequence stays meaningful as it shrinks.
#[derive(Debug, Clone)]
enum Op {
    Insert {
        lambda: usize,
        collection: usize,
        delay: Millis,
    },
    Advance(Millis),
    Poll,
    Claim(usize, Token),
    Heartbeat(usize, Token),
    Result(usize, Token, Ending),
    Cancel(usize),
    Gate {
        lambda: usize,
        collection: Option<usize>,
        state: GateState,
    },
    Redrive(usize),
    Materialize {
        lambda: usize,
        stale: bool,
    },
}

fn token() -> impl Strategy<Value = Token> {
    prop_oneof![4 => Just(Token::Current), 1 => Just(Token::Stale)]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..2usize, 0..2usize, prop_oneof![Just(0), 0..3_000i64])
            .prop_map(|(lambda, collection, delay)| Op::Insert { lambda, collection, delay }),
        3 => prop_oneof![1..500i64, 1_000..6_000i64].prop_map(Op::Advance),
        1 => (0..2usize, any::<bool>()).prop_map(|(lambda, stale)| Op::Materialize { lambda, stale }),
        17 => racing_op(),
    ]
}

/// The operations a race may hold: no clock moves and nothing that makes a
/// task (tasks made at once could not be told apart by their ids).
/// Generated directly rather than filtered from [`op`]: a long run's
/// filtered draws exceed proptest's limit on rejections.
fn racing_op() -> impl Strategy<Value = Op> {
    let task = 0..MAX_TASKS;
    prop_oneof![
        4 => Just(Op::Poll),
        4 => (task.clone(), token()).prop_map(|(t, k)| Op::Claim(t, k)),
        2 => (task.clone(), token()).prop_map(|(t, k)| Op::Heartbeat(t, k)),
        3 => (
            task.clone(),
            token(),
            prop_oneof![
                Just(Ending::Success),
                Just(Ending::Fatal),
                (0..4_000u64).prop_map(Ending::Retriable)
            ]
        )
            .prop_map(|(t, k, e)| Op::Result(t, k, e)),
        1 => task.clone().prop_map(Op::Cancel),
        2 => (
            0..2usize,
            prop::option::of(0..2usize),
            prop_oneof![
                Just(GateState::Open),
                Just(GateState::Paused),
                Just(GateState::Dropped)
            ]
        )
            .prop_map(|(lambda, collection, state)| Op::Gate { lambda, collection, state }),
        1 => task.prop_map(Op::Redrive),
    ]
}

/// A step: one operation, or (for backends with real concurrency) a race.
#[derive(Debug, Clone)]
enum Step {
    One(Op),
    Race(Vec<Op>),
}

fn steps(races: bool, len: usize) -> impl Strategy<Value = Vec<Step>> {
    let step = if races {
        prop_oneof![
            4 => op().prop_map(Step::One),
            1 => prop::collection::vec(racing_op(), 2..=3).prop_map(Step::Race),
        ]
        .boxed()
    } else {
        op().prop_map(Step::One).boxed()
    };
    prop::collection::vec(step, 1..=len)
}

/// An answer of any operation, comparable with the model's.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    Inserted,
    Advanced,
    Poll(PollAnswer),
    Claim(ClaimAnswer),
    Heartbeat(Result<(), waft_store::Refusal>),
    Result(Result<TaskStatus, waft_store::Refusal>),
    Cancel(CancelAnswer),
    Gate(u64),
    Redrive(RedriveAnswer),
    Materialized(bool),
    Skipped,
}

/// The sequence's state beside the model: the clock and the tasks' ids.
struct Run<'a> {
    store: &'a dyn TaskStore,
    model: Model,
    now: Millis,
    ids: Vec<String>,
}

impl Run<'_> {
    fn task(&self, index: usize) -> Option<String> {
        (!self.ids.is_empty()).then(|| self.ids[index % self.ids.len()].clone())
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

    /// Runs an operation on the backend only; the model follows in
    /// [`Run::apply_model`] with the same inputs.
    async fn apply_store(&self, op: &Op, input: &Input) -> Answer {
        let store = self.store;
        let now = self.now;
        match (op, input) {
            (Op::Insert { .. }, Input::Insert(task)) => {
                store
                    .task_insert_many(TaskInsertMany {
                        tasks: vec![task.clone()],
                        now,
                    })
                    .await
                    .unwrap();
                Answer::Inserted
            }
            (Op::Advance(_), _) => Answer::Advanced,
            (Op::Poll, _) => {
                let report = store
                    .task_enqueue_ready(TaskEnqueueReady {
                        now,
                        limit: 1000,
                        enqueue_timeout: Duration::from_millis(ENQUEUE_TIMEOUT as u64),
                    })
                    .await
                    .unwrap();
                assert_eq!(report.paced, 0);
                let mut enqueued: Vec<_> = report
                    .enqueued
                    .into_iter()
                    .map(|t| (t.id, t.enqueue_token))
                    .collect();
                enqueued.sort();
                Answer::Poll(PollAnswer {
                    enqueued,
                    held: report.held,
                    dropped: report.dropped,
                    dead: report.dead,
                })
            }
            (Op::Claim(..), Input::Task(id, token)) => {
                let answer = store
                    .task_claim_many(TaskClaimMany {
                        claims: vec![(id.clone(), *token)],
                        now,
                        claim_timeout: Duration::from_millis(CLAIM_TIMEOUT as u64),
                    })
                    .await
                    .unwrap()
                    .remove(0);
                Answer::Claim(answer.map(|c| (c.attempt, c.lease_token)))
            }
            (Op::Heartbeat(..), Input::Task(id, lease)) => Answer::Heartbeat(
                store
                    .task_heartbeat_many(TaskHeartbeatMany {
                        beats: vec![Heartbeat {
                            id: id.clone(),
                            lease_token: *lease,
                            progress: Some("half\0way".into()),
                        }],
                        now,
                        heartbeat_timeout: Duration::from_millis(HEARTBEAT_TIMEOUT as u64),
                    })
                    .await
                    .unwrap()
                    .remove(0),
            ),
            (Op::Result(_, _, ending), Input::Task(id, lease)) => {
                let outcome = match ending {
                    Ending::Success => ResultOutcome::Success {
                        output: Some(vec![0, 1, 2]),
                    },
                    Ending::Fatal => ResultOutcome::Fatal {
                        error: "fatal\0\\".into(),
                    },
                    Ending::Retriable(after) => ResultOutcome::Retriable {
                        error: "again".into(),
                        retry_after: Some(Duration::from_millis(*after)),
                    },
                };
                Answer::Result(
                    store
                        .task_set_result_many(TaskSetResultMany {
                            results: vec![TaskResult {
                                id: id.clone(),
                                lease_token: *lease,
                                outcome,
                                log: Some("log\0".into()),
                            }],
                            now,
                        })
                        .await
                        .unwrap()
                        .remove(0),
                )
            }
            (Op::Cancel(_), Input::Task(id, _)) => {
                Answer::Cancel(match store.task_cancel(id, now).await {
                    Ok(task) => {
                        assert_eq!(task.status, TaskStatus::Cancelled);
                        CancelAnswer::Cancelled
                    }
                    Err(StoreError::TaskNotFound(_)) => CancelAnswer::NotFound,
                    Err(StoreError::AlreadyEnded { status, .. }) => {
                        CancelAnswer::AlreadyEnded(status)
                    }
                    Err(other) => panic!("cancel failed: {other}"),
                })
            }
            (
                Op::Gate {
                    lambda,
                    collection,
                    state,
                },
                _,
            ) => Answer::Gate(
                store
                    .gate_set(GateSet {
                        lambda: LAMBDAS[*lambda].into(),
                        collection: collection.map(|c| COLLECTIONS[c].to_owned()),
                        state: *state,
                        now,
                    })
                    .await
                    .unwrap(),
            ),
            (Op::Redrive(_), Input::Task(id, _)) => Answer::Redrive(
                match store
                    .dead_redrive(DeadRedrive {
                        selector: DeadSelector::Ids(vec![id.clone()]),
                        version: None,
                        now,
                    })
                    .await
                {
                    Ok(1) => RedriveAnswer::Redriven,
                    Ok(n) => panic!("redrove {n} tasks of one id"),
                    Err(StoreError::TaskNotFound(_)) => RedriveAnswer::NotFound,
                    Err(StoreError::NotDead { status, .. }) => RedriveAnswer::NotDead(status),
                    Err(other) => panic!("redrive failed: {other}"),
                },
            ),
            (Op::Materialize { lambda, .. }, Input::Cron(expected)) => {
                let schedule = format!("cron-{}", LAMBDAS[*lambda]);
                let answer = store
                    .cron_materialize(CronMaterialize {
                        cron_id: schedule,
                        expected: *expected,
                        occurrence: *expected,
                        next_at: expected + CRON_PERIOD,
                        now,
                    })
                    .await
                    .unwrap();
                match answer {
                    Materialized::Created(_) => Answer::Materialized(true),
                    Materialized::AlreadyDone => Answer::Materialized(false),
                    Materialized::Skipped(why) => panic!("occurrence skipped: {why}"),
                }
            }
            (_, Input::Nothing) => Answer::Skipped,
            other => unreachable!("{other:?}"),
        }
    }

    /// The inputs of an operation, fixed before it runs (so a race's
    /// operations and every serial order of them use the same ones).
    fn input(&mut self, op: &Op) -> Input {
        match op {
            Op::Insert {
                lambda,
                collection,
                delay,
            } => {
                if self.ids.len() >= MAX_TASKS {
                    return Input::Nothing;
                }
                Input::Insert(NewTask {
                    lambda: LAMBDAS[*lambda].into(),
                    collection: Some(COLLECTIONS[*collection].into()),
                    payload: b"\0".to_vec(),
                    run_at: Some(self.now + delay),
                    ..NewTask::default()
                })
            }
            Op::Claim(task, which) => match self.task(*task) {
                Some(id) => {
                    let token = self.token(&id, *which, true);
                    Input::Task(id, token)
                }
                None => Input::Nothing,
            },
            Op::Heartbeat(task, which) | Op::Result(task, which, _) => match self.task(*task) {
                Some(id) => {
                    let lease = self.token(&id, *which, false);
                    Input::Task(id, lease)
                }
                None => Input::Nothing,
            },
            Op::Cancel(task) | Op::Redrive(task) => match self.task(*task) {
                Some(id) => Input::Task(id, 0),
                None => Input::Nothing,
            },
            Op::Materialize { lambda, stale } => {
                let next = self.model.crons[&format!("cron-{}", LAMBDAS[*lambda])];
                Input::Cron(if *stale { next - CRON_PERIOD } else { next })
            }
            Op::Advance(_) | Op::Poll | Op::Gate { .. } => Input::Other,
        }
    }

    /// Runs an operation on the model; `created` is the id the backend gave
    /// a task this operation made.
    fn apply_model(
        model: &mut Model,
        now: Millis,
        op: &Op,
        input: &Input,
        created: &mut Vec<String>,
    ) -> Answer {
        match (op, input) {
            (_, Input::Nothing) => Answer::Skipped,
            (Op::Insert { .. }, Input::Insert(task)) => {
                let id = created.remove(0);
                model.insert(
                    id,
                    &task.lambda,
                    task.collection.as_deref().unwrap(),
                    task.run_at.unwrap(),
                );
                Answer::Inserted
            }
            (Op::Advance(_), _) => Answer::Advanced,
            (Op::Poll, _) => Answer::Poll(model.poll(now)),
            (Op::Claim(..), Input::Task(id, token)) => Answer::Claim(model.claim(id, *token, now)),
            (Op::Heartbeat(..), Input::Task(id, lease)) => {
                Answer::Heartbeat(model.heartbeat(id, *lease, now))
            }
            (Op::Result(_, _, ending), Input::Task(id, lease)) => {
                Answer::Result(model.result(id, *lease, *ending, now))
            }
            (Op::Cancel(_), Input::Task(id, _)) => Answer::Cancel(model.cancel(id, now)),
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
            (Op::Redrive(_), Input::Task(id, _)) => Answer::Redrive(model.redrive(id, now)),
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

    /// Compares the backend's tasks with the model's and checks the state
    /// table's invariants on the backend's own state.
    async fn compare(&self, context: &str) {
        self.check_invariants().await;
        if let Some(difference) = self.difference().await {
            panic!("diverged from the model {context}: {difference}");
        }
    }

    /// How the backend's tasks and gates differ from the model's, if they do.
    async fn difference(&self) -> Option<String> {
        for (id, expected) in &self.model.tasks {
            let task = self.store.task_get(id).await.unwrap().unwrap();
            let seen = (
                task.status,
                task.held,
                task.next_trigger_at,
                task.attempt,
                task.enqueue_token,
                task.lease_token,
            );
            let wanted = (
                expected.status,
                expected.held,
                expected.next_trigger_at,
                expected.attempt,
                expected.enqueue_token,
                expected.lease_token,
            );
            if seen != wanted {
                return Some(format!("task {id}: {seen:?}, the model {wanted:?}"));
            }
        }
        let gates: Vec<_> = self
            .store
            .gate_list()
            .await
            .unwrap()
            .into_iter()
            .map(|g| ((g.lambda, g.collection.unwrap_or_default()), g.state))
            .collect();
        let wanted: Vec<_> = self
            .model
            .gates
            .iter()
            .map(|(key, state)| (key.clone(), *state))
            .collect();
        (gates != wanted).then(|| format!("gates {gates:?}, the model {wanted:?}"))
    }

    /// The state table's invariants, on the backend's own state.
    async fn check_invariants(&self) {
        let gates = self.store.gate_list().await.unwrap();
        for id in self.model.tasks.keys() {
            let task = self.store.task_get(id).await.unwrap().unwrap();
            if task.status.is_terminal() {
                assert!(task.next_trigger_at.is_none() && !task.held, "{task:?}");
            } else if task.held {
                assert!(task.next_trigger_at.is_none());
                assert_eq!(task.status, machine::waiting(task.attempt));
                assert!(
                    gates.iter().any(|g| g.lambda == task.lambda
                        && g.collection.as_ref().is_none_or(|c| *c == task.collection)),
                    "held with no gate: {task:?}"
                );
            } else {
                assert!(task.next_trigger_at.is_some(), "forgotten: {task:?}");
            }
            assert!(task.attempt <= MAX_ATTEMPTS);
        }
    }

    /// The ended executions, compared once a sequence is over.
    async fn compare_history(&self) {
        for (id, expected) in &self.model.tasks {
            let attempts: Vec<_> = self
                .store
                .attempt_list(id)
                .await
                .unwrap()
                .into_iter()
                .map(|a| (a.lease_token, a.attempt, a.outcome))
                .collect();
            assert_eq!(attempts, expected.attempts, "history of {id}");
        }
    }
}

/// The inputs an operation was run with.
#[derive(Debug, Clone)]
enum Input {
    Insert(NewTask),
    /// A task's id and the token or lease given.
    Task(String, i64),
    /// A schedule's expected next occurrence.
    Cron(Millis),
    Other,
    /// The operation had nothing to act on (no task yet, or enough).
    Nothing,
}

static OPERATIONS: AtomicU64 = AtomicU64::new(0);

async fn setup(store: &dyn TaskStore) -> Model {
    let mut model = Model::default();
    for lambda in LAMBDAS {
        store
            .lambda_deploy(LambdaDeploy {
                name: lambda.into(),
                digest: format!("digest-{lambda}"),
                component: vec![1],
                artifact: None,
                config: LambdaConfig {
                    max_attempts: MAX_ATTEMPTS,
                    ..LambdaConfig::default()
                },
                now: T0,
            })
            .await
            .unwrap();
        let id = format!("cron-{lambda}");
        store
            .cron_create(Cron {
                id: id.clone(),
                lambda: lambda.into(),
                cron: "* * * * *".into(),
                timezone: "UTC".into(),
                payload: vec![],
                collection: None,
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
async fn run_sequence(store: &dyn TaskStore, steps: &[Step]) {
    let mut run = Run {
        store,
        model: setup(store).await,
        now: T0,
        ids: Vec::new(),
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
            Step::Race(ops) => {
                let inputs: Vec<Input> = ops.iter().map(|op| run.input(op)).collect();
                let answers = futures::future::join_all(
                    ops.iter()
                        .zip(&inputs)
                        .map(|(op, input)| run.apply_store(op, input)),
                )
                .await;
                OPERATIONS.fetch_add(ops.len() as u64, Ordering::Relaxed);
                // Tasks made in a race: the new ids in the store.
                let mut created = new_task_ids(store, &run).await;
                let made = created.clone();
                // Serial orders that give the same answers may leave
                // different states (a pause and a drop of one gate): one of
                // them must be the backend's.
                let mut serials = linearize(&run.model, run.now, ops, &inputs, &answers, &made);
                if serials.is_empty() {
                    serials =
                        linearize_polls_as_one(&run.model, run.now, ops, &inputs, &answers, &made);
                }
                assert!(
                    !serials.is_empty(),
                    "{context}: answers {answers:?} match no serial order"
                );
                let mut matched = false;
                for serial in serials {
                    run.model = serial;
                    if run.difference().await.is_none() {
                        matched = true;
                        break;
                    }
                }
                assert!(
                    matched,
                    "{context}: no serial order leaves the backend's state"
                );
                created.retain(|id| run.model.tasks.contains_key(id));
                run.ids.extend(created);
            }
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
async fn new_task_ids(store: &dyn TaskStore, run: &Run<'_>) -> Vec<String> {
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

/// Like [`linearize`], with the polls of the race taken as one. Concurrent
/// polls lock due tasks with `SKIP LOCKED` as they read them, so they may
/// split the due tasks between them (as several consumers do): together
/// they did the work of one poll, whose answer is the sum of theirs.
fn linearize_polls_as_one(
    model: &Model,
    now: Millis,
    ops: &[Op],
    inputs: &[Input],
    answers: &[Answer],
    made: &[String],
) -> Vec<Model> {
    let polls: Vec<usize> = (0..ops.len())
        .filter(|&i| matches!(ops[i], Op::Poll))
        .collect();
    if polls.len() < 2 {
        return Vec::new();
    }
    let mut sum = PollAnswer::default();
    for &i in &polls {
        if let Answer::Poll(answer) = &answers[i] {
            sum.enqueued.extend(answer.enqueued.iter().cloned());
            sum.held += answer.held;
            sum.dropped += answer.dropped;
            sum.dead += answer.dead;
        }
    }
    sum.enqueued.sort();
    let kept: Vec<usize> = (0..ops.len()).filter(|i| !polls[1..].contains(i)).collect();
    let ops: Vec<Op> = kept.iter().map(|&i| ops[i].clone()).collect();
    let inputs: Vec<Input> = kept.iter().map(|&i| inputs[i].clone()).collect();
    let answers: Vec<Answer> = kept
        .iter()
        .map(|&i| {
            if i == polls[0] {
                Answer::Poll(sum.clone())
            } else {
                answers[i].clone()
            }
        })
        .collect();
    linearize(model, now, &ops, &inputs, &answers, made)
}

/// The models after each serial order of `ops` that gives exactly the
/// answers the backend gave.
fn linearize(
    model: &Model,
    now: Millis,
    ops: &[Op],
    inputs: &[Input],
    answers: &[Answer],
    made: &[String],
) -> Vec<Model> {
    let mut serials = Vec::new();
    let mut orders = vec![vec![]];
    for _ in 0..ops.len() {
        orders = orders
            .into_iter()
            .flat_map(|order: Vec<usize>| {
                (0..ops.len())
                    .filter(|i| !order.contains(i))
                    .map(|i| {
                        let mut next = order.clone();
                        next.push(i);
                        next
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
    }
    'order: for order in orders {
        let mut candidate = model.clone();
        let mut created = made.to_vec();
        for &i in &order {
            let answer = Run::apply_model(&mut candidate, now, &ops[i], &inputs[i], &mut created);
            if answer != answers[i] {
                continue 'order;
            }
        }
        serials.push(candidate);
    }
    serials
}

fn config() -> Config {
    let cases = std::env::var("WAFT_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48);
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

fn max_steps() -> usize {
    std::env::var("WAFT_MODEL_STEPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40)
}

fn runner() -> TestRunner {
    match std::env::var("WAFT_MODEL_SEED") {
        Ok(seed) => {
            let seed: u64 = seed.parse().expect("WAFT_MODEL_SEED is a number");
            let mut bytes = [0u8; 32];
            bytes[..8].copy_from_slice(&seed.to_le_bytes());
            TestRunner::new_with_rng(config(), TestRng::from_seed(RngAlgorithm::ChaCha, &bytes))
        }
        Err(_) => TestRunner::new(config()),
    }
}

/// Drives `runner` with fresh stores from `fresh`.
fn drive<S, F, Fut>(name: &str, races: bool, fresh: F)
where
    S: TaskStore + 'static,
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = (S, Box<dyn std::any::Any>)>,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    OPERATIONS.store(0, Ordering::Relaxed);
    let result = runner().run(&steps(races, max_steps()), |steps| {
        runtime.block_on(async {
            let (store, _guard) = fresh().await;
            run_sequence(&store, &steps).await;
        });
        Ok(())
    });
    println!(
        "{name}: {} operations in {:.1?}, {}",
        OPERATIONS.load(Ordering::Relaxed),
        started.elapsed(),
        match &result {
            Ok(()) => "0 divergences".to_owned(),
            Err(proptest::test_runner::TestError::Abort(why)) => format!("aborted: {why}"),
            Err(proptest::test_runner::TestError::Fail(..)) => "DIVERGED".to_owned(),
        }
    );
    if let Err(error) = result {
        panic!("{error}");
    }
}

#[test]
fn sqlite_follows_the_model() {
    drive("sqlite", false, || async {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("waft.db"))
            .await
            .unwrap();
        (store, Box::new(dir) as Box<dyn std::any::Any>)
    });
}

#[test]
fn postgres_follows_the_model_and_races_linearize() {
    let Some(server) = waft_testing::postgres() else {
        return;
    };
    // One database, emptied before each sequence: creating one per
    // sequence took most of a long run's time.
    let (store, url) = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let url = server.fresh_database().await;
        (PostgresStore::connect(&url, 8).await.unwrap(), url)
    });
    drive("postgres", true, || {
        let (store, url) = (store.clone(), url.clone());
        async move {
            let mut admin = sqlx::PgConnection::connect(&url).await.unwrap();
            admin
                .execute(
                    "TRUNCATE artifacts, components, lambdas, lambda_versions, lambda_pace, tasks, \
                     attempts, gates, crons, tokens, secrets",
                )
                .await
                .unwrap();
            let _ = admin.close().await;
            (store, Box::new(()) as Box<dyn std::any::Any>)
        }
    });
}
