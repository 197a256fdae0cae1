//! Results go to the HSC in batches: every result ready when the reporter
//! is free, a thousand at most and cut by bytes ([`crate::batch`]), so that
//! however many large outputs end together, each call stays under the
//! HSC's message limit and one tenant's bytes never sink another's results.
//!
//! A result no batch could carry is made to fit rather than left to fail
//! its batch: its log is cut to the room beside its outcome, and an output
//! over what a task carries (possible only for a version deployed under an
//! earlier, wider bound) ends the task failed, saying why.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use waft_core::limits::{MAX_BATCH_BYTES, MAX_CARRIED, cut_text};
use waft_store::{ResultOutcome, TaskResult};

use crate::batch::{self, Budget, WireSize};
use crate::{HeartbeatConfig, HscApi, ServiceError};

/// Delivers results to the HSC in batches, retrying while it is
/// unreachable. A result that cannot be delivered within the heartbeat
/// timeout is given up: the task comes due again and runs once more
/// (at-least-once).
pub(super) struct ResultReporter;

/// How one call for a batch ended.
enum Sent {
    Delivered,
    /// The HSC refused the batch as such: retrying it whole cannot help.
    Refused(ServiceError),
    /// Unreachable until it was time to give up.
    GaveUp(ServiceError),
}

impl ResultReporter {
    const MAX_BATCH: usize = 1000;

    pub(super) fn start(
        hsc: Arc<dyn HscApi>,
        heartbeat: HeartbeatConfig,
    ) -> (
        mpsc::UnboundedSender<TaskResult>,
        tokio::task::JoinHandle<()>,
    ) {
        let (sender, mut receiver) = mpsc::unbounded_channel::<TaskResult>();
        let handle = tokio::spawn(async move {
            let mut ready = Vec::with_capacity(Self::MAX_BATCH);
            while receiver.recv_many(&mut ready, Self::MAX_BATCH).await > 0 {
                let give_up_at = Instant::now() + heartbeat.heartbeat_timeout;
                let results = ready.drain(..).map(fit).collect();
                let budget = Budget::items(Self::MAX_BATCH);
                for results in batch::cut(results, budget, WireSize::wire_size) {
                    Self::deliver(&*hsc, results, give_up_at).await;
                }
            }
        });
        (sender, handle)
    }

    /// Delivers `results`; a batch the HSC refuses as such goes again in
    /// halves, so that one result it cannot take does not sink the others.
    async fn deliver(hsc: &dyn HscApi, results: Vec<TaskResult>, give_up_at: Instant) {
        let mut pending = vec![results];
        while let Some(mut results) = pending.pop() {
            match Self::send(hsc, &results, give_up_at).await {
                Sent::Delivered => {}
                Sent::Refused(error) if results.len() > 1 => {
                    tracing::warn!(%error, results = results.len(), "results refused together; sending them in halves");
                    let second = results.split_off(results.len() / 2);
                    pending.push(second);
                    pending.push(results);
                }
                Sent::Refused(error) => {
                    tracing::error!(%error, task = %results[0].id, "result refused; the task will run again");
                }
                Sent::GaveUp(error) => {
                    tracing::error!(%error, results = results.len(), "giving up on results; the tasks will run again");
                }
            }
        }
    }

    /// One batch, retried while the HSC is unreachable until `give_up_at`.
    async fn send(hsc: &dyn HscApi, results: &[TaskResult], give_up_at: Instant) -> Sent {
        let mut pause = Duration::from_millis(50);
        loop {
            match hsc.task_set_result_many(results.to_vec()).await {
                Ok(answers) => {
                    for (result, answer) in results.iter().zip(answers) {
                        if let Err(refusal) = answer {
                            tracing::warn!(task = %result.id, ?refusal, "result refused: the lease was lost meanwhile");
                        }
                    }
                    return Sent::Delivered;
                }
                Err(
                    error @ (ServiceError::ResourceExhausted(_) | ServiceError::InvalidArgument(_)),
                ) => return Sent::Refused(error),
                Err(error) if Instant::now() + pause < give_up_at => {
                    tracing::warn!(%error, results = results.len(), "cannot deliver results; retrying");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
                Err(error) => return Sent::GaveUp(error),
            }
        }
    }
}

/// `result` as one batch carries it: unchanged when it fits. Else an
/// output over [`MAX_CARRIED`] ends the task failed with the reason, an
/// error message is cut to that, and the log to the room left beside them.
fn fit(result: TaskResult) -> TaskResult {
    if result.wire_size() <= MAX_BATCH_BYTES {
        return result;
    }
    let carried = MAX_CARRIED.as_usize();
    let outcome = match result.outcome {
        ResultOutcome::Success {
            output: Some(output),
        } if output.len() > carried => ResultOutcome::Fatal {
            error: format!(
                "output of {} bytes is over the {MAX_CARRIED} one task carries between \
                 Waft's processes",
                output.len()
            ),
        },
        ResultOutcome::Retriable { error, retry_after } => ResultOutcome::Retriable {
            error: cut_text(error, carried),
            retry_after,
        },
        ResultOutcome::Fatal { error } => ResultOutcome::Fatal {
            error: cut_text(error, carried),
        },
        kept @ (ResultOutcome::Success { .. } | ResultOutcome::Suspend { .. }) => kept,
    };
    let mut fitted = TaskResult {
        outcome,
        log: None,
        ..result
    };
    let room = MAX_BATCH_BYTES.saturating_sub(fitted.wire_size());
    fitted.log = result.log.map(|log| cut_text(log, room));
    fitted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(output: usize, log: usize) -> TaskResult {
        TaskResult {
            id: "01M81141G398N4ZV4VMQVXT2M3".into(),
            lease_token: 3,
            outcome: ResultOutcome::Success {
                output: Some(vec![b'o'; output]),
            },
            log: Some("l".repeat(log)),
            journal: None,
            replayed: 0,
        }
    }

    #[test]
    fn a_result_that_fits_is_unchanged() {
        let small = result(1 << 20, 1 << 10);
        assert_eq!(fit(small.clone()), small);
    }

    #[test]
    fn an_output_at_the_bound_keeps_its_output_and_loses_the_end_of_its_log() {
        let fitted = fit(result(MAX_CARRIED.as_usize(), 15 << 20));
        assert!(fitted.wire_size() <= MAX_BATCH_BYTES);
        assert_eq!(
            fitted,
            TaskResult {
                log: fitted.log.clone(),
                ..result(MAX_CARRIED.as_usize(), 0)
            }
        );
        let log = fitted.log.unwrap();
        assert!(log.len() > 100 << 10, "{} bytes of log kept", log.len());
        assert!(log.ends_with(&format!("[{} bytes in all]", 15 << 20)));
    }

    #[test]
    fn an_output_no_batch_carries_ends_the_task_failed_with_the_reason() {
        let fitted = fit(result(17 << 20, 1 << 10));
        let ResultOutcome::Fatal { error } = &fitted.outcome else {
            panic!("{:?}", fitted.outcome);
        };
        assert!(error.contains(&(17 << 20).to_string()), "{error}");
        assert!(error.contains("15MiB"), "{error}");
        assert_eq!(fitted.log.as_deref().map(str::len), Some(1 << 10));
        assert_eq!(
            (fitted.id.as_str(), fitted.lease_token),
            ("01M81141G398N4ZV4VMQVXT2M3", 3)
        );
    }

    /// Refuses any batch holding a result of task `bad`; records the ids
    /// of every batch it took.
    #[derive(Default)]
    struct PickyHsc {
        taken: std::sync::Mutex<Vec<Vec<String>>>,
    }

    #[async_trait::async_trait]
    impl HscApi for PickyHsc {
        async fn task_claim_many(
            &self,
            _: Vec<(String, i64)>,
        ) -> crate::ServiceResult<Vec<Result<waft_store::ClaimedTask, waft_store::Refusal>>>
        {
            unreachable!("results only")
        }

        async fn task_heartbeat_many(
            &self,
            _: Vec<waft_store::Heartbeat>,
        ) -> crate::ServiceResult<Vec<Result<(), waft_store::Refusal>>> {
            unreachable!("results only")
        }

        async fn task_set_result_many(
            &self,
            results: Vec<TaskResult>,
        ) -> crate::ServiceResult<Vec<Result<waft_core::TaskStatus, waft_store::Refusal>>> {
            if results.iter().any(|r| r.id == "bad") {
                return Err(ServiceError::ResourceExhausted("too large".into()));
            }
            let ids = results.iter().map(|r| r.id.clone()).collect();
            self.taken.lock().unwrap().push(ids);
            Ok(vec![Ok(waft_core::TaskStatus::Success); results.len()])
        }

        async fn task_journal_write(
            &self,
            _: crate::JournalCommit,
        ) -> crate::ServiceResult<Result<(), waft_store::Refusal>> {
            unreachable!("results only")
        }

        async fn task_journal_read(
            &self,
            _: crate::JournalPage,
        ) -> crate::ServiceResult<Result<Vec<waft_store::JournalEntry>, waft_store::Refusal>>
        {
            unreachable!("results only")
        }
        async fn task_signal_read(
            &self,
            _: waft_store::TaskSignalRead,
        ) -> crate::ServiceResult<Result<Option<Vec<u8>>, waft_store::Refusal>> {
            unreachable!("results only")
        }
        async fn task_children_read(
            &self,
            _: waft_store::TaskChildrenRead,
        ) -> crate::ServiceResult<Result<waft_store::ChildrenState, waft_store::Refusal>> {
            unreachable!("results only")
        }
    }

    #[tokio::test]
    async fn a_result_the_hsc_refuses_does_not_sink_its_batch() {
        let hsc = PickyHsc::default();
        let ids = ["a", "b", "c", "bad", "d", "e", "f"];
        let results = ids
            .iter()
            .map(|id| TaskResult {
                id: (*id).into(),
                ..result(1, 1)
            })
            .collect();
        let give_up_at = Instant::now() + Duration::from_secs(60);
        ResultReporter::deliver(&hsc, results, give_up_at).await;
        let mut delivered: Vec<String> = hsc.taken.lock().unwrap().concat();
        delivered.sort();
        assert_eq!(delivered, ["a", "b", "c", "d", "e", "f"]);
    }

    #[test]
    fn a_huge_error_is_cut() {
        let fitted = fit(TaskResult {
            outcome: ResultOutcome::Retriable {
                error: "e".repeat(40 << 20),
                retry_after: Some(Duration::from_secs(1)),
            },
            ..result(0, 0)
        });
        assert!(fitted.wire_size() <= MAX_BATCH_BYTES);
        assert!(matches!(
            fitted.outcome,
            ResultOutcome::Retriable {
                retry_after: Some(_),
                ..
            }
        ));
    }
}
