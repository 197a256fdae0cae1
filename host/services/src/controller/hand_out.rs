//! What `NextWork` hands out: messages taken from the buffers of the
//! lambdas an executor has room for — each lambda's highest priority
//! first, the lambdas in turn, the whole cut to what one message carries —
//! and claimed at the HSC before they are answered, so only claimed tasks
//! leave the Controller.
//!
//! Apart from the pollers (`polling.rs`) because the two meet only in the
//! buffers: pollers put messages in, `NextWork` takes them out.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::Ordering;

use async_trait::async_trait;
use tokio::time::Instant;
use waft_core::limits::ITEM_OVERHEAD;
use waft_core::{ByteSize, LambdaConfig, TraceContext};
use waft_queue::{Delivery, QueueKey};
use waft_store::{ClaimedTask, Refusal};

use super::{Controller, Inner, MAX_NEXT_WORK_TASKS, MAX_NEXT_WORK_WAIT};
use crate::batch::{Budget, Filling};
use crate::{ControllerApi, LambdaSlots, NextWork, ServiceError, ServiceResult, lock, spans};

impl Inner {
    /// Takes buffered messages for the slots: a lambda's highest priority
    /// first, and the lambdas in turn, one message each per round, starting
    /// from a lambda that moves on with every call. Filled in slot order
    /// instead, a busy lambda could take all the room of a poll and starve
    /// every lambda after it.
    ///
    /// A hand-out holds what one message carries, each task counted at its
    /// lambda's weight; a lambda whose next task does not fit gives no more.
    fn take(&self, slots: &[LambdaSlots], max: usize) -> Vec<(QueueKey, Delivery)> {
        let mut filling = Filling::new(Budget::items(max.min(MAX_NEXT_WORK_TASKS)));
        let mut taken = Vec::new();
        if slots.is_empty() || self.held.load(Ordering::Relaxed) == 0 {
            return taken;
        }
        let mut free: Vec<usize> = slots.iter().map(|slot| slot.free as usize).collect();
        let start = self.turn.fetch_add(1, Ordering::Relaxed) % slots.len();
        // In discovery's order: the buffers, then the weights.
        let mut buffers = lock(&self.buffers);
        let weights = lock(&self.weights);
        loop {
            let before = taken.len();
            for offset in 0..slots.len() {
                if filling.is_full() {
                    return taken;
                }
                let index = (start + offset) % slots.len();
                let slot = &slots[index];
                if free[index] == 0 {
                    continue;
                }
                let Some(levels) = buffers.get_mut(&slot.lambda) else {
                    continue;
                };
                let Some((priority, buffer)) = levels
                    .iter_mut()
                    .enumerate()
                    .rev()
                    .find(|(_, buffer)| !buffer.deliveries.is_empty())
                else {
                    continue;
                };
                let unknown = || weight(LambdaConfig::MAX_PAYLOAD);
                let weight = weights.get(&slot.lambda).copied().unwrap_or_else(unknown);
                if !filling.admit(weight) {
                    free[index] = 0;
                    continue;
                }
                let Some(delivery) = buffer.deliveries.pop() else {
                    continue;
                };
                self.held.fetch_sub(1, Ordering::Relaxed);
                buffer.room.add_permits(1);
                free[index] -= 1;
                taken.push((QueueKey::new(&slot.lambda, priority as u8), delivery));
            }
            if taken.len() == before {
                return taken;
            }
        }
    }

    /// Claims taken messages at the HSC; acknowledges every message that
    /// got an answer.
    async fn claim(&self, taken: Vec<(QueueKey, Delivery)>) -> ServiceResult<Vec<ClaimedTask>> {
        let claims = taken
            .iter()
            .map(|(_, d)| (d.message.task_id.clone(), d.message.enqueue_token))
            .collect();
        let spans: Vec<tracing::Span> = taken
            .iter()
            .map(|(key, d)| match message_trace(d) {
                Some(trace) => spans::claim(&d.message.task_id, &key.lambda, Some(&trace)),
                // An untraced enqueue: the execution continues from what
                // the store kept, if anything.
                None => tracing::Span::none(),
            })
            .collect();
        let answers = match self.hsc.task_claim_many(claims).await {
            Ok(answers) => answers,
            Err(error) => {
                spans.iter().for_each(spans::failed);
                return Err(error);
            }
        };
        if answers.len() != taken.len() {
            return Err(ServiceError::Internal(format!(
                "the HSC answered {} claims with {} answers",
                taken.len(),
                answers.len()
            )));
        }
        let mut acks: BTreeMap<QueueKey, Vec<String>> = BTreeMap::new();
        let mut claimed = Vec::with_capacity(answers.len());
        for (((key, delivery), answer), span) in taken.into_iter().zip(answers).zip(spans) {
            match answer {
                Ok(mut task) => {
                    span.record("waft.task.attempt", task.attempt);
                    // The execution is the claim's child when traced.
                    if let Some(trace) = waft_telemetry::context_of(&span) {
                        task.trace = Some(trace);
                    }
                    claimed.push(task);
                }
                Err(refusal) => {
                    span.record("waft.claim.refused", format!("{refusal:?}"));
                    log_refusal(&delivery, &refusal);
                }
            }
            acks.entry(key).or_default().push(delivery.receipt);
        }
        let queue = self.queue.clone();
        tokio::spawn(async move {
            for (key, receipts) in acks {
                if let Err(error) = queue.queue_ack_many(&key, receipts).await {
                    tracing::warn!(queue = %key, %error, "cannot acknowledge messages; their claims will be refused when they come back");
                }
            }
        });
        Ok(claimed)
    }
}

/// The most a claimed task of a lambda with `max_payload` weighs in a
/// batch: its payload, the longest names, and the rest.
pub(super) fn weight(max_payload: ByteSize) -> usize {
    // A task id, a lambda name and a collection name.
    const NAMES: usize = 26 + 2 * 63;
    max_payload.as_usize() + NAMES + ITEM_OVERHEAD
}

/// The trace context a queue message carries; a malformed one is dropped
/// (the claim's span then starts from none, and the execution from the
/// context the store kept).
fn message_trace(delivery: &Delivery) -> Option<TraceContext> {
    let message = &delivery.message;
    TraceContext::parse(
        message.traceparent.as_deref()?,
        message.tracestate.as_deref(),
    )
    .ok()
}

fn log_refusal(delivery: &Delivery, refusal: &Refusal) {
    tracing::debug!(task = %delivery.message.task_id, ?refusal, "claim refused; message dropped");
}

#[async_trait]
impl ControllerApi for Controller {
    async fn next_work(&self, request: NextWork) -> ServiceResult<Vec<ClaimedTask>> {
        let inner = &self.inner;
        let served = &inner.config.lambdas;
        let unknown: HashSet<&str> = {
            let buffers = lock(&inner.buffers);
            request
                .slots
                .iter()
                .map(|slot| slot.lambda.as_str())
                .filter(|lambda| !buffers.contains_key(*lambda))
                .collect()
        };
        if let Some(lambda) = unknown
            .iter()
            .find(|l| !served.is_empty() && !served.iter().any(|s| s == *l))
        {
            return Err(ServiceError::FailedPrecondition(format!(
                "this controller does not serve lambda {lambda:?}"
            )));
        }
        if !unknown.is_empty() {
            inner.discover.notify_one();
        }
        let deadline = Instant::now() + request.wait.min(MAX_NEXT_WORK_WAIT);
        loop {
            let arrived = inner.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            let taken = inner.take(&request.slots, request.max_tasks as usize);
            if !taken.is_empty() {
                let claimed = inner.claim(taken).await?;
                if !claimed.is_empty() {
                    return Ok(claimed);
                }
                continue;
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return Ok(Vec::new());
            }
        }
    }
}
