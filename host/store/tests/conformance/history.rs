//! Task history: the HSCs' counts add up per lambda and minute (several
//! HSCs adding to one row), latency histograms merge by bucket, the
//! sampler's depth is set, reads add lambdas together or keep to one, and
//! pruning deletes the minutes past the history's retention. Results
//! answer their task's lambda, which the HSC counts them under.

use waft_core::TaskStatus;
use waft_store::{
    DepthSample, HistoryAdd, HistoryDepth, HistoryPrune, HistoryRead, LambdaDelete,
    LatencyHistogram, MINUTE, MinuteCounts, TaskResult, TaskSetResultMany, TaskStore,
};

use crate::support::{T0, deploy, insert, new_task, retriable, start, success};

fn counts(lambda: &str, minute: i64, succeeded: u64, failed: u64, latency: &[i64]) -> MinuteCounts {
    let mut histogram = LatencyHistogram::default();
    for ms in latency {
        histogram.record(*ms);
    }
    MinuteCounts {
        lambda: lambda.into(),
        minute,
        succeeded,
        failed,
        dead: 0,
        latency: histogram,
    }
}

async fn read(store: &dyn TaskStore, lambda: Option<&str>) -> Vec<waft_store::HistoryMinute> {
    store
        .history_read(HistoryRead {
            lambda: lambda.map(Into::into),
            from: T0 - 60 * MINUTE,
            to: T0 + 60 * MINUTE,
        })
        .await
        .unwrap()
}

pub async fn minutes_add_up_across_writers_and_lambdas(store: &dyn TaskStore) {
    let m0 = T0;
    let m1 = T0 + MINUTE;
    // Two HSCs add to the same minute; one batch names a key twice.
    store
        .history_add(HistoryAdd {
            minutes: vec![
                counts("mail", m0, 3, 1, &[5, 5]),
                counts("mail", m0, 1, 0, &[]),
                counts("pdf", m0, 0, 2, &[2000]),
            ],
        })
        .await
        .unwrap();
    store
        .history_add(HistoryAdd {
            minutes: vec![
                counts("mail", m0, 2, 0, &[5, 3000]),
                counts("mail", m1, 0, 1, &[]),
            ],
        })
        .await
        .unwrap();
    store
        .history_depth(HistoryDepth {
            samples: vec![
                DepthSample {
                    lambda: "mail".into(),
                    minute: m0,
                    depth: 7,
                },
                DepthSample {
                    lambda: "pdf".into(),
                    minute: m0,
                    depth: 5,
                },
            ],
        })
        .await
        .unwrap();
    // A later sample of the minute replaces the earlier; counts stay.
    store
        .history_depth(HistoryDepth {
            samples: vec![DepthSample {
                lambda: "mail".into(),
                minute: m0,
                depth: 4,
            }],
        })
        .await
        .unwrap();

    let mail = read(store, Some("mail")).await;
    assert_eq!(mail.len(), 2);
    assert_eq!(
        (mail[0].minute, mail[0].succeeded, mail[0].failed),
        (m0, 6, 1)
    );
    assert_eq!(mail[0].depth, Some(4));
    assert_eq!(mail[0].latency.total(), 4);
    assert_eq!(
        mail[0].latency.nonzero().collect::<Vec<_>>(),
        vec![(3, 3), (12, 1)]
    );
    assert_eq!(
        (mail[1].minute, mail[1].failed, mail[1].depth),
        (m1, 1, None)
    );

    let all = read(store, None).await;
    assert_eq!(all.len(), 2);
    assert_eq!((all[0].succeeded, all[0].failed), (6, 3));
    assert_eq!(all[0].depth, Some(9), "depths of lambdas add up");
    assert_eq!(all[0].latency.total(), 5);
    assert!(read(store, Some("other")).await.is_empty());

    // Only what is past the retention goes.
    let deleted = store
        .history_prune(HistoryPrune { before: m1 })
        .await
        .unwrap();
    assert!(deleted >= 2, "{deleted}");
    let all = read(store, None).await;
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].minute, m1);
}

pub async fn results_answer_their_tasks_lambda(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let done = insert(store, new_task("mail"), T0).await;
    let retried = insert(store, new_task("mail"), T0).await;
    let lease_done = start(store, &done, T0).await;
    let lease_retried = {
        let task = store.task_get(&retried).await.unwrap().unwrap();
        let claimed = crate::support::claim(store, &retried, task.enqueue_token, T0)
            .await
            .unwrap();
        claimed.lease_token
    };
    let result = |id: &str, lease, outcome| TaskResult {
        id: id.into(),
        lease_token: lease,
        outcome,
        log: None,
        journal: None,
        replayed: 0,
    };
    let answers = store
        .task_record_many(TaskSetResultMany {
            results: vec![
                result(&done, lease_done, success()),
                result(&retried, lease_retried, retriable("again")),
                result(&done, lease_done, success()),
            ],
            now: T0 + 1,
        })
        .await
        .unwrap();
    let first = answers[0].as_ref().unwrap();
    assert_eq!(
        (first.status, first.lambda.as_str()),
        (TaskStatus::Success, "mail")
    );
    let second = answers[1].as_ref().unwrap();
    assert_eq!(second.lambda, "mail");
    assert_ne!(second.status, TaskStatus::Success);
    assert!(answers[2].is_err(), "a repeat is refused");
}

pub async fn a_deleted_lambda_takes_its_history(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    deploy(store, "pdf").await;
    store
        .history_add(HistoryAdd {
            minutes: vec![
                counts("mail", T0, 1, 1, &[3]),
                counts("pdf", T0, 2, 0, &[3]),
            ],
        })
        .await
        .unwrap();
    store
        .lambda_delete(LambdaDelete {
            name: "mail".into(),
            drop_tasks: false,
        })
        .await
        .unwrap();
    assert!(read(store, Some("mail")).await.is_empty());
    let all = read(store, None).await;
    assert_eq!((all[0].succeeded, all[0].latency.total()), (2, 1));
}
