//! Results go to the HSC in batches: every result ready when the reporter
//! is free goes in one call.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use waft_store::TaskResult;

use crate::{HeartbeatConfig, HscApi};

/// Delivers results to the HSC in batches, retrying while it is
/// unreachable. A result that cannot be delivered within the heartbeat
/// timeout is given up: the task comes due again and runs once more
/// (at-least-once).
pub(super) struct ResultReporter;

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
            let mut batch = Vec::with_capacity(Self::MAX_BATCH);
            while receiver.recv_many(&mut batch, Self::MAX_BATCH).await > 0 {
                Self::deliver(
                    &*hsc,
                    std::mem::take(&mut batch),
                    heartbeat.heartbeat_timeout,
                )
                .await;
            }
        });
        (sender, handle)
    }

    async fn deliver(hsc: &dyn HscApi, results: Vec<TaskResult>, give_up_after: Duration) {
        let started = Instant::now();
        let mut pause = Duration::from_millis(50);
        loop {
            match hsc.task_set_result_many(results.clone()).await {
                Ok(answers) => {
                    for (result, answer) in results.iter().zip(answers) {
                        if let Err(refusal) = answer {
                            tracing::warn!(task = %result.id, ?refusal, "result refused: the lease was lost meanwhile");
                        }
                    }
                    return;
                }
                Err(error) if started.elapsed() + pause < give_up_after => {
                    tracing::warn!(%error, results = results.len(), "cannot deliver results; retrying");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
                Err(error) => {
                    tracing::error!(%error, results = results.len(), "giving up on results; the tasks will run again");
                    return;
                }
            }
        }
    }
}
