//! Periodic schedules: each occurrence materialises once.

use waft_store::{Cron, CronMaterialize, StoreError, TaskStore};

use crate::support::*;

pub async fn each_occurrence_materialises_once(store: &dyn TaskStore) {
    deploy(store, "report").await;
    let schedule = Cron {
        id: "nightly".into(),
        lambda: "report".into(),
        cron: "0 3 * * *".into(),
        timezone: "UTC".into(),
        payload: b"{}".to_vec(),
        collection: None,
        key: Some("acme\0corp".into()),
        priority: Some(1),
        catch_up: false,
        next_at: T0,
        created_at: T0,
    };
    store.cron_create(schedule.clone()).await.unwrap();
    assert!(store.cron_due(T0 - 1, 10).await.unwrap().is_empty());
    assert_eq!(
        store.cron_due(T0, 10).await.unwrap(),
        std::slice::from_ref(&schedule)
    );

    let occurrence = |now| CronMaterialize {
        cron_id: "nightly".into(),
        expected: T0,
        occurrence: T0,
        next_at: T0 + 86_400_000,
        now,
    };
    let task = store
        .cron_materialize(occurrence(T0))
        .await
        .unwrap()
        .created()
        .expect("first wins");
    assert_eq!(
        store.cron_materialize(occurrence(T0 + 1)).await.unwrap(),
        waft_store::Materialized::AlreadyDone,
        "second loses"
    );
    let task = store.task_get(&task).await.unwrap().unwrap();
    assert_eq!(
        (
            task.cron_id.as_deref(),
            task.priority,
            task.scheduled_at,
            task.key.as_deref()
        ),
        (Some("nightly"), 1, T0, Some("acme\0corp"))
    );
    assert_eq!(store.cron_list().await.unwrap()[0].next_at, T0 + 86_400_000);

    // Eight consumers race for the next occurrence: one task, once.
    const DAY: i64 = 86_400_000;
    let racers = (0..8).map(|_| {
        store.cron_materialize(CronMaterialize {
            expected: T0 + DAY,
            occurrence: T0 + DAY,
            next_at: T0 + 2 * DAY,
            ..occurrence(T0 + DAY)
        })
    });
    let won: Vec<String> = futures::future::join_all(racers)
        .await
        .into_iter()
        .filter_map(|answer| answer.unwrap().created())
        .collect();
    assert_eq!(won.len(), 1, "{won:?}");

    // Skipping missed occurrences: the oldest is expected, the latest runs.
    let skipped = store
        .cron_materialize(CronMaterialize {
            expected: T0 + 2 * DAY,
            occurrence: T0 + 5 * DAY,
            next_at: T0 + 6 * DAY,
            ..occurrence(T0 + 5 * DAY)
        })
        .await
        .unwrap()
        .created()
        .expect("the latest occurrence");
    let skipped = store.task_get(&skipped).await.unwrap().unwrap();
    assert_eq!(skipped.scheduled_at, T0 + 5 * DAY);
    assert_eq!(store.cron_list().await.unwrap()[0].next_at, T0 + 6 * DAY);

    let missing = store
        .cron_materialize(CronMaterialize {
            cron_id: "nope".into(),
            ..occurrence(T0)
        })
        .await;
    assert!(
        matches!(missing, Err(StoreError::CronNotFound(_))),
        "{missing:?}"
    );
    let bad = store
        .cron_create(Cron {
            id: "x".into(),
            lambda: "nope".into(),
            ..schedule
        })
        .await;
    assert!(matches!(bad, Err(StoreError::UnknownLambda(_))), "{bad:?}");
    assert!(store.cron_delete("nightly").await.unwrap());
    assert!(!store.cron_delete("nightly").await.unwrap());
}
