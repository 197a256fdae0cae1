//! The race handling (Postgres only): two or three operations run at once on
//! separate connections, then every serial order of them is replayed on the
//! model, and the backend's answers and state must be those of one of them.
//! Polls racing each other may split the due tasks between them (`SKIP
//! LOCKED`, as several consumers do); they are matched as one poll doing the
//! work of all. Apart from `run.rs` because a race is checked by search over
//! orders, not step by step.

use std::sync::atomic::Ordering;

use waft_core::{TaskStatus, machine};
use waft_store::Millis;

use crate::OPERATIONS;
use crate::ops::Op;
use crate::reference::{Model, PollAnswer};
use crate::run::{Answer, Input, Run, new_task_ids};

/// Runs a race's operations at once on the backend, and makes the run's
/// model that of the serial order whose answers and state are the
/// backend's.
pub async fn run_race(run: &mut Run<'_>, ops: &[Op], context: &str) {
    let inputs: Vec<Input> = ops.iter().map(|op| run.input(op)).collect();
    let answers = futures::future::join_all(
        ops.iter()
            .zip(&inputs)
            .map(|(op, input)| run.apply_store(op, input)),
    )
    .await;
    OPERATIONS.fetch_add(ops.len() as u64, Ordering::Relaxed);
    // Tasks made in a race: the new ids in the store.
    let mut created = new_task_ids(run.store, run).await;
    let made = created.clone();
    // Serial orders that give the same answers may leave
    // different states (a pause and a drop of one gate): one of
    // them must be the backend's.
    let mut serials = linearize(&run.model, run.now, ops, &inputs, &answers, &made);
    if serials.is_empty() {
        serials = linearize_polls_as_one(&run.model, run.now, ops, &inputs, &answers, &made);
    }
    if serials.is_empty() {
        serials =
            linearize_polls_skipping_locked(&run.model, run.now, ops, &inputs, &answers, &made);
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
            sum.parked += answer.parked;
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

/// Like [`linearize`], with the race's polls skipping tasks its other
/// operations lock: a poll locks due tasks with `SKIP LOCKED`, and leaves
/// a task whose row another transaction holds to the next poll. A poll
/// that read the task while it was held skipped it (and comes before that
/// operation in the serial order: it decided as if the task were not due);
/// one that read it before or after did not. So each poll skipped any
/// subset of the locked tasks, of its own: of two racing polls, one may
/// have read a task while a signal held it and the other after.
///
/// The rows held: a signal's and a journal write's task, while it runs
/// (the task stays as due as it was); a cancel's task, which it locks
/// before it reads its state (and which waits, once it leaves flight, for
/// a poll deciding by limits to commit: `tasks_landed` takes the keys'
/// lock); a claim's, a heartbeat's and a result's task when its update's
/// guard holds (its token or lease is current, the task queued or
/// running), which the update locks, and a result waits for such a poll
/// as a cancel does; a redrive's, while it looks whether the task is dead;
/// and the rows fan-ins lock: an ending task's parent, a waiting task's
/// children.
fn linearize_polls_skipping_locked(
    model: &Model,
    now: Millis,
    ops: &[Op],
    inputs: &[Input],
    answers: &[Answer],
    made: &[String],
) -> Vec<Model> {
    let mut locked: Vec<String> = ops
        .iter()
        .zip(inputs)
        .flat_map(|(op, input)| locked_by(model, op, input))
        .collect();
    locked.sort();
    locked.dedup();
    let polls: Vec<usize> = (0..ops.len())
        .filter(|&i| matches!(ops[i], Op::Poll))
        .collect();
    if locked.is_empty() || polls.is_empty() {
        return Vec::new();
    }
    // Each poll's subset is a digit, base 2^locked, of `choice`; choice 0
    // (no poll skipped anything) is `linearize` itself.
    let subsets = 1usize << locked.len();
    let choices = subsets.pow(polls.len() as u32);
    let mut serials = Vec::new();
    for choice in 1..choices {
        let mut inputs = inputs.to_vec();
        let mut rest = choice;
        for &poll in &polls {
            let subset = rest % subsets;
            rest /= subsets;
            let skipped = (0..locked.len())
                .filter(|bit| subset & (1 << bit) != 0)
                .map(|bit| locked[bit].clone())
                .collect();
            inputs[poll] = Input::PollSkipping(skipped);
        }
        serials.extend(linearize(model, now, ops, &inputs, answers, made));
    }
    serials
}

/// The rows an operation locks while it runs (see
/// [`linearize_polls_skipping_locked`]), as the model stood before the
/// race.
fn locked_by(model: &Model, op: &Op, input: &Input) -> Vec<String> {
    let parent = |id: &str| model.tasks.get(id).and_then(|t| t.parent.clone());
    let task = |id: &str| model.tasks.get(id);
    let running_under = |id: &str, lease: i64| {
        task(id).is_some_and(|t| machine::RUNNING.contains(t.status) && t.lease_token == lease)
    };
    let own = |id: &str, locks: bool| locks.then(|| id.to_owned());
    match (op, input) {
        (Op::Signal { .. }, Input::Signal(id, _))
        | (Op::Journal(..), Input::Journal { id, .. }) => {
            vec![id.clone()]
        }
        // A result's end (a claim's drop, a cancel) locks the task's
        // parent while it looks whether it waits for its children; a wait
        // for children locks them.
        (
            Op::Result(..),
            Input::Result {
                id,
                lease,
                children,
                ..
            },
        ) => parent(id)
            .into_iter()
            .chain(own(id, running_under(id, *lease)))
            .chain(children.iter().cloned())
            .collect(),
        (Op::Redrive { .. } | Op::Cancel(_), Input::Task(id, _)) => {
            parent(id).into_iter().chain([id.clone()]).collect()
        }
        (Op::Claim(..), Input::Task(id, token)) => {
            let queued = task(id).is_some_and(|t| {
                t.status == TaskStatus::Enqueued && t.enqueue_token == *token && !t.held
            });
            parent(id).into_iter().chain(own(id, queued)).collect()
        }
        (Op::Heartbeat(..), Input::Task(id, lease)) => parent(id)
            .into_iter()
            .chain(own(id, running_under(id, *lease)))
            .collect(),
        (_, Input::Task(id, _)) => parent(id).into_iter().collect(),
        _ => Vec::new(),
    }
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
