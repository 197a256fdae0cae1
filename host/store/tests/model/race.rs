//! The race handling (Postgres only): two or three operations run at once on
//! separate connections, then every serial order of them is replayed on the
//! model, and the backend's answers and state must be those of one of them.
//! Polls racing each other may split the due tasks between them (`SKIP
//! LOCKED`, as several consumers do); they are matched as one poll doing the
//! work of all. Apart from `run.rs` because a race is checked by search over
//! orders, not step by step.

use std::sync::atomic::Ordering;

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

/// Like [`linearize`], with the race's polls skipping the tasks its
/// signals, journal writes and redrives name: each locks its task's row and
/// leaves the task as due as it was (a signal while it looks whether the
/// task waits for it, a journal write as it writes, a redrive refused as
/// it looks whether the task is dead), and a poll skips locked
/// rows (`SKIP LOCKED`), leaving the task to the next poll: any of the
/// locked tasks, as the poll read each before or after its lock. (Other writers
/// make the task not due, or end it, so a poll after them skips it too.)
/// So do the rows fan-ins lock: an ending task's parent, a waiting task's
/// children.
fn linearize_polls_skipping_locked(
    model: &Model,
    now: Millis,
    ops: &[Op],
    inputs: &[Input],
    answers: &[Answer],
    made: &[String],
) -> Vec<Model> {
    let parent = |id: &str| model.tasks.get(id).and_then(|t| t.parent.clone());
    let locked: Vec<String> = ops
        .iter()
        .zip(inputs)
        .flat_map(|(op, input)| match (op, input) {
            // A redrive locks the task while it looks whether it is dead: a
            // refused one leaves it as due as it was.
            (Op::Redrive { .. }, Input::Task(id, _)) => {
                parent(id).into_iter().chain([id.clone()]).collect()
            }
            (_, input) => locked_by(input, &parent),
        })
        .collect();
    let mut locked = locked;
    locked.sort();
    locked.dedup();
    if locked.is_empty() || !ops.iter().any(|op| matches!(op, Op::Poll)) {
        return Vec::new();
    }
    // The poll may have read a task before or after its lock was taken:
    // it skipped some of the locked tasks, any of them.
    let mut serials = Vec::new();
    for subset in 1..1u32 << locked.len() {
        let skipped: Vec<String> = (0..locked.len())
            .filter(|bit| subset & (1 << bit) != 0)
            .map(|bit| locked[bit].clone())
            .collect();
        let inputs: Vec<Input> = ops
            .iter()
            .zip(inputs)
            .map(|(op, input)| match op {
                Op::Poll => Input::PollSkipping(skipped.clone()),
                _ => input.clone(),
            })
            .collect();
        serials.extend(linearize(model, now, ops, &inputs, answers, made));
    }
    serials
}

/// The rows an operation's input locks while it runs, besides what a
/// redrive locks.
fn locked_by(input: &Input, parent: &dyn Fn(&str) -> Option<String>) -> Vec<String> {
    match input {
        Input::Signal(id, _) | Input::Journal { id, .. } => vec![id.clone()],
        // A result's end (a claim's drop, a cancel) locks the task's
        // parent while it looks whether it waits for its children; a wait
        // for children locks them.
        Input::Result { id, children, .. } => parent(id)
            .into_iter()
            .chain(children.iter().cloned())
            .collect(),
        Input::Task(id, _) => parent(id).into_iter().collect(),
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
