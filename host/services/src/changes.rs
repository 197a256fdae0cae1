//! Following the lambdas' generation: how executors and controllers learn
//! of a deploy or rollback at once instead of at their next refresh.
//!
//! A long poll ([`crate::api::ClusterApi::lambda_changed`]) that passes back the last
//! generation it was answered, so a change between two polls is never
//! missed, and works the same in one process and across processes. The
//! periodic refresh stays as the safety net for a Frontend that cannot be
//! reached.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use crate::FrontendApi;
use crate::frontend::MAX_CHANGE_WAIT;

/// Notifies `changed` (one stored permit) at every change of the lambdas
/// `frontend` reports, forever; run it on a task of its own and abort it.
pub(crate) async fn follow(frontend: Arc<dyn FrontendApi>, changed: Arc<Notify>) {
    let mut seen = 0;
    let mut failures = 0u32;
    loop {
        match frontend.lambda_changed(seen, MAX_CHANGE_WAIT).await {
            Ok(generation) => {
                failures = 0;
                if generation != seen {
                    seen = generation;
                    changed.notify_one();
                }
            }
            Err(error) => {
                failures += 1;
                if failures == 1 {
                    tracing::warn!(%error, "cannot follow the lambdas' changes; refreshing on a timer until the Frontend answers");
                }
                tokio::time::sleep(Duration::from_millis(100 << failures.min(5))).await;
            }
        }
    }
}
