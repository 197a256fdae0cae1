//! A case's run held against the reference model, execution by execution:
//! what the server received, how each execution ended, what the journal
//! it left still holds, what the task answered, and its children.

use std::collections::BTreeMap;

use waft_core::TaskStatus;

use super::harness::{Execution, Ran};
use super::reference::{End, Held, Prediction, predict};

/// How an execution really ended, as the model names it; `None` for an
/// end the model leaves open (a suspension).
fn end_of(execution: &Execution) -> Option<End> {
    if execution.killed {
        return Some(End::Killed);
    }
    match execution.outcome.as_deref() {
        Some("success") => Some(End::Success),
        Some("retriable") => Some(End::Retriable),
        Some("fatal") => Some(End::Fatal),
        Some("trapped") => Some(End::Trapped),
        _ => None,
    }
}

/// Checks `ran`; the number of executions checked.
pub fn check(ran: &Ran) -> Result<usize, String> {
    let current = &ran.current;
    let case = &current.case;
    let tags = case.tags();
    let mut counts: BTreeMap<String, u32> = BTreeMap::new();
    // Per generation, the children reached: at least, at most.
    let mut children: BTreeMap<u32, (u32, u32)> = BTreeMap::new();
    let mut last: Option<(Prediction, End)> = None;
    if current.executions.is_empty() {
        return Err("the task never ran".into());
    }
    for (index, execution) in current.executions.iter().enumerate() {
        let at = format!("execution {index} (attempt {})", execution.attempt);
        let fault = case.faults.get(&index);
        let p = predict(case, execution.attempt, &execution.before, &counts, fault);
        let received: Vec<_> = current
            .receipts
            .iter()
            .filter(|r| r.execution == index)
            .collect();
        for receipt in &received {
            if !p.may.contains(&receipt.tag) {
                let place = tags.iter().position(|t| *t == receipt.tag);
                let held = place.and_then(|p| execution.before.get(p));
                return Err(format!(
                    "{at} sent request {} (receipt {}), which the model forbids: the journal \
                     it started from holds {held:?} there",
                    receipt.tag, receipt.n
                ));
            }
            let place = tags
                .iter()
                .position(|t| *t == receipt.tag)
                .expect("a tag of the program");
            let key = format!("waft-{}-{place}", current.task);
            if receipt.key.as_deref() != Some(key.as_str()) {
                return Err(format!(
                    "{at} sent request {} with key {:?}, not {key}",
                    receipt.tag, receipt.key
                ));
            }
        }
        // An execution the executor lost on its own (its watchdog stopped
        // it, the runtime killed it) may have stopped anywhere.
        let lost = !execution.killed && end_of(execution).is_none();
        for tag in p.must.iter().filter(|_| !lost) {
            if !received.iter().any(|r| r.tag == *tag) {
                return Err(format!(
                    "{at} never sent request {tag}, which the model says it makes (the \
                     journal it started from: {:?})",
                    execution.before
                ));
            }
        }
        for receipt in &received {
            *counts.entry(receipt.tag.clone()).or_insert(0) += 1;
        }
        let end = end_of(execution);
        if let Some(end) = end
            && !p.ends.contains(&end)
        {
            return Err(format!(
                "{at} ended {end:?}, the model says {:?} (journal it started from: {:?})",
                p.ends, execution.before
            ));
        }
        let reached = children.entry(execution.generation).or_insert((0, 0));
        reached.0 = reached.0.max(p.children.0);
        reached.1 = reached.1.max(p.children.1);

        // The journal it left: the next execution's of its generation, or
        // the one at the end.
        let next = current.executions.get(index + 1);
        let after: &[Held] = match next {
            Some(next) if next.generation == execution.generation => &next.before,
            Some(next) => {
                if !next.before.is_empty() {
                    return Err(format!(
                        "after the fresh redrive, execution {} started from a journal: {:?}",
                        index + 1,
                        next.before
                    ));
                }
                last = end.map(|e| (p, e));
                continue;
            }
            None => &ran.after,
        };
        let cut = |place: usize| p.cut_from.is_some_and(|c| place >= c);
        for (place, held) in execution.before.iter().enumerate() {
            if let Held::Answered(_) = held
                && !cut(place)
                && after.get(place) != Some(held)
            {
                return Err(format!(
                    "{at} started from a journal answering request {} ({held:?}); the journal \
                     it left holds {:?} there",
                    tags[place],
                    after.get(place)
                ));
            }
        }
        for (tag, n) in &execution.committed {
            let place = tags
                .iter()
                .position(|t| t == tag)
                .expect("a tag of the program");
            if !cut(place) && after.get(place) != Some(&Held::Answered(Some(*n))) {
                return Err(format!(
                    "{at} wrote the answer to request {tag} (receipt {n}) to the store; the \
                     journal it left holds {:?} there (all of it: {after:?})",
                    after.get(place)
                ));
            }
        }
        // Only an execution that did give up makes its failure again: one
        // killed (or stopped) before it could keeps the failure's answer,
        // which the next attempt replays and gives up after (rule 5).
        if let Some(place) = p.remade
            && matches!(end, Some(End::Retriable | End::Fatal))
            && let Some(Held::Answered(n)) = after.get(place)
        {
            return Err(format!(
                "{at} gave up after request {} failed, but the journal it left keeps its \
                 answer ({n:?}): the request is never made again",
                tags[place]
            ));
        }
        last = end.map(|e| (p, e));
    }
    // The task's end, and what it answered.
    if let Some((p, end)) = &last {
        let expected = match end {
            End::Success => Some(TaskStatus::Success),
            End::Fatal => Some(TaskStatus::FatalFailure),
            End::Retriable | End::Trapped | End::Killed => Some(TaskStatus::Dead),
        };
        if expected != Some(ran.status) {
            return Err(format!(
                "the last execution ended {end:?}, but the task is {:?}",
                ran.status
            ));
        }
        if *end == End::Success {
            let output: serde_json::Value =
                serde_json::from_slice(ran.output.as_deref().unwrap_or_default())
                    .map_err(|e| format!("the output is not JSON: {e}"))?;
            let answers: BTreeMap<String, String> =
                serde_json::from_value(output["answers"].clone())
                    .map_err(|e| format!("the output has no answers: {e}"))?;
            if answers != p.answers {
                return Err(format!(
                    "the task answered {answers:?}, the model says {:?}",
                    p.answers
                ));
            }
        }
    }
    let (least, most) = children
        .values()
        .fold((0, 0), |(l, m), (a, b)| (l + a, m + b));
    let made = u32::try_from(ran.children).unwrap_or(u32::MAX);
    if made < least || made > most {
        return Err(format!(
            "the task has {made} children; the model says {least} to {most} (one per child \
             step reached in each generation: a fresh redrive starts new children)"
        ));
    }
    Ok(current.executions.len())
}
