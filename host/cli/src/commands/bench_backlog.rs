//! `waft bench pipeline --backlog N`: what pruning costs the pipeline.
//!
//! Before the measured runs, N tasks of a second lambda run and end, kept
//! forever. With `--prune-backlog` the lambda is then deployed again with
//! its successes kept one second, and the runs start once the pruner has
//! begun deleting them: the runs are measured while the pruner works
//! through a backlog. Without it the same tasks stay, so the two runs
//! differ only in the pruning.

use std::sync::Arc;
use std::time::{Duration, Instant};

use waft_client::FrontendClient;
use waft_core::LambdaConfig;
use waft_core::retention::Retention;
use waft_services::ClientApi;
use waft_store::TaskCount;

use super::bench_pipeline::{failed, schedule, wait_all};
use crate::exit::Failure;

/// The collection the backlog's tasks are scheduled in.
const COLLECTION: &str = "backlog";

/// The second lambda and how many of its tasks the store held when the
/// runs began.
pub(crate) struct Backlog {
    lambda: String,
    at_start: u64,
    pruned: bool,
}

impl Backlog {
    /// Runs `count` tasks of `wasm` as the lambda `name` and leaves them in
    /// the store, past their retention when `prune`.
    pub(crate) async fn fill(
        frontend: &Arc<FrontendClient>,
        name: String,
        wasm: Vec<u8>,
        count: usize,
        prune: bool,
        payload: &[u8],
    ) -> Result<Self, Failure> {
        let kept = |retain: &str| -> Result<LambdaConfig, Failure> {
            Ok(LambdaConfig {
                retention: Retention::parse_each([retain]).map_err(Failure::internal)?,
                ..LambdaConfig::default()
            })
        };
        frontend
            .lambda_deploy(&name, wasm.clone(), kept("success=forever")?)
            .await
            .map_err(failed("deploy the backlog's lambda"))?;
        println!("backlog: running {count} tasks of {name} first");
        schedule(frontend, &name, COLLECTION, count, 500, 4, None, payload, 0).await?;
        wait_all(frontend, &name, COLLECTION, count, None).await?;
        let mut backlog = Self {
            lambda: name,
            at_start: count as u64,
            pruned: prune,
        };
        if prune {
            // Their retention lapses now; the runs wait for the pruner's
            // first batch.
            frontend
                .lambda_deploy(&backlog.lambda, wasm, kept("success=1s")?)
                .await
                .map_err(failed("deploy the backlog's lambda again"))?;
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let left = backlog.left(frontend).await?;
                if left < count as u64 {
                    backlog.at_start = left;
                    break;
                }
                if Instant::now() > deadline {
                    return Err(Failure::internal(
                        "the pruner did not begin on the backlog within 60 s",
                    ));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(backlog)
    }

    /// The backlog's tasks still in the store.
    async fn left(&self, frontend: &FrontendClient) -> Result<u64, Failure> {
        let counts = frontend
            .task_count(TaskCount {
                lambda: self.lambda.clone(),
                collection: None,
                parent_id: None,
                ..TaskCount::default()
            })
            .await
            .map_err(failed("count the backlog"))?;
        Ok(counts.iter().map(|c| c.count).sum())
    }

    /// Says what the pruner deleted while the runs were measured.
    pub(crate) async fn report(
        &self,
        frontend: &FrontendClient,
        phase: &str,
    ) -> Result<(), Failure> {
        let left = self.left(frontend).await?;
        match self.pruned {
            true => println!(
                "backlog after {phase}: {} of {} pruned ({left} left)",
                self.at_start - left.min(self.at_start),
                self.at_start
            ),
            false => println!("backlog after {phase}: {left} kept, none past its retention"),
        }
        Ok(())
    }
}
