//! The queue conformance suite, run against every backend: the in-process
//! queue, and SQS through a real SQS-compatible server (fauxqs) that the
//! tests start on loopback. Under `CI=true` the SQS tests fail rather than
//! skip when it cannot start.

#[path = "conformance/suite.rs"]
mod suite;

use std::sync::atomic::{AtomicU32, Ordering};

use waft_queue::{MemoryQueue, SqsConfig, SqsQueue};

/// A lambda name no other test uses, so every test has queues of its own.
fn lambda() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "l{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

async fn sqs() -> Option<SqsQueue> {
    let server = waft_testing::sqs()?;
    Some(
        SqsQueue::new(SqsConfig {
            endpoint_url: Some(server.endpoint.clone()),
            visibility_timeout: suite::VISIBILITY,
            ..SqsConfig::default()
        })
        .await,
    )
}

macro_rules! conformance {
    ($($check:ident),* $(,)?) => {
        mod memory_backend {
            $(
                #[tokio::test]
                async fn $check() {
                    let queue = super::MemoryQueue::new(super::suite::VISIBILITY);
                    super::suite::$check(&queue, &super::lambda()).await;
                }
            )*
        }

        mod sqs_backend {
            $(
                #[tokio::test]
                async fn $check() {
                    let Some(queue) = super::sqs().await else { return };
                    super::suite::$check(&queue, &super::lambda()).await;
                }
            )*
        }
    };
}

conformance!(
    sent_messages_are_received_once_acknowledged,
    unacknowledged_messages_come_back,
    an_empty_receive_waits_then_returns_nothing,
    a_long_poll_wakes_when_a_message_arrives,
    queues_of_other_priorities_and_lambdas_are_apart,
);
