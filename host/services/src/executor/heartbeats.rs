//! An executor's heartbeats, to the HSC in batches.
//!
//! Each running execution's watchdog heartbeats on its own tick; sent one
//! by one, an executor running 10,000 long tasks would make 10,000 HSC
//! calls per interval. Instead every beat joins a queue, and one
//! `task_heartbeat_many` carries all the beats that arrive within a short
//! window (a quarter of the RPC timeout) — a few calls per interval however
//! many tasks run. Each watchdog still gets its own answer, and still times
//! its beat out on its own: a beat waits at most the window before it
//! leaves, and batches are sent concurrently, so a slow call holds up no
//! later one.
//!
//! The fence stays safe: a watchdog counts an acknowledged beat's fence from
//! when it handed the beat over, before the batch left and before the store
//! recorded it.
//!
//! A batch is cut by bytes as well as by count ([`crate::batch`]): the
//! runtime keeps a lambda's note short, so a thousand beats fit one call;
//! and should a beat ever be too large for any call, it goes alone and
//! fails alone, never taking every other tenant's beats — and their
//! watchdogs' verdicts — with it.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{mpsc, oneshot};
use waft_store::Heartbeat;

use crate::batch::{self, Budget, WireSize};
use crate::{HeartbeatFailure, HeartbeatSink, HscApi};

/// Beats per HSC call at most.
const MAX_BATCH: usize = 1000;

type Answer = Result<(), HeartbeatFailure>;

/// The executor's [`HeartbeatSink`]: one per executor, shared by every
/// execution's watchdog.
pub(super) struct BatchedHeartbeats {
    hsc: Arc<dyn HscApi>,
    /// How long a batch waits for more beats once its first arrives.
    window: Duration,
    /// How long a call may take: its watchdogs give up on it then.
    rpc_timeout: Duration,
    /// The batcher's queue, started with the first beat (on the caller's
    /// runtime); the batcher ends when this sink is dropped.
    queue: OnceLock<mpsc::UnboundedSender<(Heartbeat, oneshot::Sender<Answer>)>>,
}

impl BatchedHeartbeats {
    /// Batches for `hsc`, gathering beats for a quarter of `rpc_timeout`.
    pub(super) fn new(hsc: Arc<dyn HscApi>, rpc_timeout: Duration) -> Self {
        Self {
            hsc,
            window: rpc_timeout / 4,
            rpc_timeout,
            queue: OnceLock::new(),
        }
    }

    fn queue(&self) -> &mpsc::UnboundedSender<(Heartbeat, oneshot::Sender<Answer>)> {
        self.queue.get_or_init(|| {
            let (sender, receiver) = mpsc::unbounded_channel();
            let (hsc, window, timeout) = (self.hsc.clone(), self.window, self.rpc_timeout);
            tokio::spawn(batcher(hsc, window, timeout, receiver));
            sender
        })
    }
}

#[async_trait]
impl HeartbeatSink for BatchedHeartbeats {
    async fn heartbeat(
        &self,
        task_id: &str,
        lease_token: i64,
        progress: Option<String>,
    ) -> Result<(), HeartbeatFailure> {
        let beat = Heartbeat {
            id: task_id.to_owned(),
            lease_token,
            progress,
        };
        let (reply, answer) = oneshot::channel();
        if self.queue().send((beat, reply)).is_err() {
            return Err(HeartbeatFailure::Unreachable(
                "the executor's heartbeat batcher stopped".into(),
            ));
        }
        answer.await.unwrap_or_else(|_| {
            Err(HeartbeatFailure::Unreachable(
                "the heartbeat batch ended without an answer".into(),
            ))
        })
    }
}

/// Gathers beats into batches, cut by bytes, and sends each batch as its
/// own call.
async fn batcher(
    hsc: Arc<dyn HscApi>,
    window: Duration,
    timeout: Duration,
    mut queue: mpsc::UnboundedReceiver<(Heartbeat, oneshot::Sender<Answer>)>,
) {
    while let Some(first) = queue.recv().await {
        let mut batch = vec![first];
        let closes = tokio::time::Instant::now() + window;
        while batch.len() < MAX_BATCH {
            let room = MAX_BATCH - batch.len();
            tokio::select! {
                () = tokio::time::sleep_until(closes) => break,
                more = queue.recv_many(&mut batch, room) => {
                    if more == 0 {
                        break;
                    }
                }
            }
        }
        let cut = batch::cut(batch, Budget::items(MAX_BATCH), |(beat, _)| {
            beat.wire_size()
        });
        for batch in cut {
            tokio::spawn(send(hsc.clone(), batch, timeout));
        }
    }
}

/// One HSC call for `batch`, abandoned after `timeout`; each beat's answer
/// to its watchdog.
async fn send(
    hsc: Arc<dyn HscApi>,
    batch: Vec<(Heartbeat, oneshot::Sender<Answer>)>,
    timeout: Duration,
) {
    let (beats, replies): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
    let count = beats.len();
    let answered = tokio::time::timeout(timeout, hsc.task_heartbeat_many(beats))
        .await
        .unwrap_or_else(|_| {
            Err(crate::ServiceError::Unavailable(format!(
                "no answer within {timeout:?}"
            )))
        });
    match answered {
        Ok(answers) if answers.len() == count => {
            for (reply, answer) in replies.into_iter().zip(answers) {
                let answer =
                    answer.map_err(|refusal| HeartbeatFailure::LeaseLost(format!("{refusal:?}")));
                let _ = reply.send(answer);
            }
        }
        Ok(answers) => {
            let why = format!("the HSC answered {} of {count} heartbeats", answers.len());
            for reply in replies {
                let _ = reply.send(Err(HeartbeatFailure::Unreachable(why.clone())));
            }
        }
        Err(error) => {
            let why = error.to_string();
            for reply in replies {
                let _ = reply.send(Err(HeartbeatFailure::Unreachable(why.clone())));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use waft_core::TaskStatus;
    use waft_store::{ClaimedTask, Refusal, TaskResult};

    use super::*;
    use crate::{ServiceError, ServiceResult};

    /// Counts calls and beats; refuses beats of tasks named `lost-…`, and
    /// fails every call once `down`.
    #[derive(Default)]
    struct CountingHsc {
        calls: Mutex<Vec<usize>>,
        down: std::sync::atomic::AtomicBool,
    }

    #[async_trait]
    impl HscApi for CountingHsc {
        async fn task_claim_many(
            &self,
            _claims: Vec<(String, i64)>,
        ) -> ServiceResult<Vec<Result<ClaimedTask, Refusal>>> {
            unreachable!("heartbeats only")
        }

        async fn task_heartbeat_many(
            &self,
            beats: Vec<Heartbeat>,
        ) -> ServiceResult<Vec<Result<(), Refusal>>> {
            self.calls.lock().unwrap().push(beats.len());
            if self.down.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(ServiceError::Unavailable("the HSC is down".into()));
            }
            Ok(beats
                .iter()
                .map(|beat| match beat.id.starts_with("lost-") {
                    true => Err(Refusal::StaleLease { current: 9 }),
                    false => Ok(()),
                })
                .collect())
        }

        async fn task_set_result_many(
            &self,
            _results: Vec<TaskResult>,
        ) -> ServiceResult<Vec<Result<TaskStatus, Refusal>>> {
            unreachable!("heartbeats only")
        }

        async fn task_journal_write(
            &self,
            _: crate::JournalCommit,
        ) -> ServiceResult<Result<(), Refusal>> {
            unreachable!("heartbeats only")
        }

        async fn task_journal_read(
            &self,
            _: crate::JournalPage,
        ) -> ServiceResult<Result<Vec<waft_store::JournalEntry>, Refusal>> {
            unreachable!("heartbeats only")
        }
        async fn task_signal_read(
            &self,
            _: waft_store::TaskSignalRead,
        ) -> ServiceResult<Result<Option<Vec<u8>>, Refusal>> {
            unreachable!("heartbeats only")
        }
        async fn task_children_read(
            &self,
            _: waft_store::TaskChildrenRead,
        ) -> ServiceResult<Result<waft_store::ChildrenState, Refusal>> {
            unreachable!("heartbeats only")
        }
    }

    async fn beat_all(sink: &Arc<BatchedHeartbeats>, ids: Vec<String>) -> Vec<Answer> {
        let beats = ids.into_iter().map(|id| {
            let sink = sink.clone();
            tokio::spawn(async move { sink.heartbeat(&id, 1, None).await })
        });
        let mut answers = Vec::new();
        for beat in beats.collect::<Vec<_>>() {
            answers.push(beat.await.unwrap());
        }
        answers
    }

    #[tokio::test]
    async fn many_beats_make_few_calls_and_each_gets_its_own_answer() {
        let hsc = Arc::new(CountingHsc::default());
        let sink = Arc::new(BatchedHeartbeats::new(hsc.clone(), Duration::from_secs(1)));
        let mut ids: Vec<String> = (0..500).map(|i| format!("task-{i}")).collect();
        ids[123] = "lost-123".into();
        let answers = beat_all(&sink, ids).await;
        for (i, answer) in answers.iter().enumerate() {
            if i == 123 {
                assert!(
                    matches!(answer, Err(HeartbeatFailure::LeaseLost(_))),
                    "{answer:?}"
                );
            } else {
                assert_eq!(answer, &Ok(()), "beat {i}");
            }
        }
        let calls = hsc.calls.lock().unwrap().clone();
        assert_eq!(calls.iter().sum::<usize>(), 500);
        assert!(
            calls.len() <= 2,
            "{} calls for 500 beats: {calls:?}",
            calls.len()
        );
    }

    #[tokio::test]
    async fn a_failed_call_fails_each_of_its_beats() {
        let hsc = Arc::new(CountingHsc::default());
        hsc.down.store(true, std::sync::atomic::Ordering::SeqCst);
        let sink = Arc::new(BatchedHeartbeats::new(hsc, Duration::from_millis(100)));
        let answers = beat_all(&sink, vec!["a".into(), "b".into()]).await;
        assert!(
            answers.iter().all(
                |a| matches!(a, Err(HeartbeatFailure::Unreachable(why)) if why.contains("down"))
            ),
            "{answers:?}"
        );
    }

    /// Fails every call over `max` bytes of notes, as a receiver over its
    /// message limit does.
    struct LimitedHsc {
        max: usize,
    }

    #[async_trait]
    impl HscApi for LimitedHsc {
        async fn task_claim_many(
            &self,
            _claims: Vec<(String, i64)>,
        ) -> ServiceResult<Vec<Result<ClaimedTask, Refusal>>> {
            unreachable!("heartbeats only")
        }

        async fn task_heartbeat_many(
            &self,
            beats: Vec<Heartbeat>,
        ) -> ServiceResult<Vec<Result<(), Refusal>>> {
            let bytes: usize = beats.iter().map(WireSize::wire_size).sum();
            if bytes > self.max {
                return Err(ServiceError::ResourceExhausted(format!(
                    "request too large: {bytes} bytes"
                )));
            }
            Ok(vec![Ok(()); beats.len()])
        }

        async fn task_set_result_many(
            &self,
            _results: Vec<TaskResult>,
        ) -> ServiceResult<Vec<Result<TaskStatus, Refusal>>> {
            unreachable!("heartbeats only")
        }

        async fn task_journal_write(
            &self,
            _: crate::JournalCommit,
        ) -> ServiceResult<Result<(), Refusal>> {
            unreachable!("heartbeats only")
        }

        async fn task_journal_read(
            &self,
            _: crate::JournalPage,
        ) -> ServiceResult<Result<Vec<waft_store::JournalEntry>, Refusal>> {
            unreachable!("heartbeats only")
        }
        async fn task_signal_read(
            &self,
            _: waft_store::TaskSignalRead,
        ) -> ServiceResult<Result<Option<Vec<u8>>, Refusal>> {
            unreachable!("heartbeats only")
        }
        async fn task_children_read(
            &self,
            _: waft_store::TaskChildrenRead,
        ) -> ServiceResult<Result<waft_store::ChildrenState, Refusal>> {
            unreachable!("heartbeats only")
        }
    }

    #[tokio::test]
    async fn a_beat_too_large_for_any_call_fails_alone() {
        let hsc = Arc::new(LimitedHsc {
            max: waft_core::limits::MAX_INTERNAL_MESSAGE,
        });
        let sink = Arc::new(BatchedHeartbeats::new(hsc, Duration::from_secs(1)));
        // 300 beats of 4 KiB beside one of 17 MiB: more than a call carries,
        // in one batch if cut by count.
        let mut notes = vec!["n".repeat(4 << 10); 300];
        notes.insert(150, "n".repeat(17 << 20));
        let beats: Vec<_> = notes
            .into_iter()
            .enumerate()
            .map(|(id, note)| {
                let sink = sink.clone();
                tokio::spawn(
                    async move { sink.heartbeat(&format!("task-{id}"), 1, Some(note)).await },
                )
            })
            .collect();
        let mut answers = Vec::new();
        for beat in beats {
            answers.push(beat.await.unwrap());
        }
        let huge = answers.remove(150);
        assert!(
            matches!(&huge, Err(HeartbeatFailure::Unreachable(why)) if why.contains("too large")),
            "{huge:?}"
        );
        let failed = answers.iter().filter(|a| a.is_err()).count();
        assert_eq!(failed, 0, "{failed} of the 300 small beats failed");
    }

    #[tokio::test]
    async fn a_beat_leaves_within_the_window() {
        let hsc = Arc::new(CountingHsc::default());
        let sink = Arc::new(BatchedHeartbeats::new(hsc, Duration::from_millis(400)));
        let started = std::time::Instant::now();
        sink.heartbeat("alone", 1, Some("half way".into()))
            .await
            .unwrap();
        // A quarter of the RPC timeout, and the call itself.
        assert!(
            started.elapsed() < Duration::from_millis(300),
            "{:?}",
            started.elapsed()
        );
    }
}
