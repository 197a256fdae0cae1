//! Rates per key: a lambda's token bucket per key paces each key's starts
//! across every consumer, apart from its other keys, and before its
//! lambda's quota.

use std::collections::BTreeMap;
use std::time::Duration;

use waft_core::{KeyRate, LambdaConfig, TaskStatus};
use waft_store::{Limit, NewTask, TaskEnqueueReady, TaskInsertMany, TaskStore};

use crate::support::*;

fn rated(count: u32, period: Duration) -> LambdaConfig {
    LambdaConfig {
        key_rate: Some(KeyRate { count, period }),
        ..config()
    }
}

fn keyed(key: &str) -> NewTask {
    NewTask {
        key: Some(key.into()),
        ..new_task("mail")
    }
}

/// The ids a poll enqueued, sorted.
async fn enqueued(store: &dyn TaskStore, now: i64) -> Vec<String> {
    let mut ids: Vec<_> = poll(store, now)
        .await
        .enqueued
        .into_iter()
        .map(|t| t.id)
        .collect();
    ids.sort();
    ids
}

fn sorted(ids: &[&String]) -> Vec<String> {
    let mut ids: Vec<String> = ids.iter().map(|id| (*id).clone()).collect();
    ids.sort();
    ids
}

/// A rate of 2 a second: an idle key starts two at once, then one each
/// half second, each waiting task at its own slot (no attempt spent, and
/// no second slot taken when it comes due); other keys and tasks without
/// a key are not held back; a key idle for the period has its two again.
pub async fn a_keys_rate_paces_its_tasks_and_spares_the_others(store: &dyn TaskStore) {
    deploy_with(store, "mail", rated(2, Duration::from_secs(1))).await;
    let mut acme = Vec::new();
    for i in 0..5 {
        acme.push(insert(store, keyed("acme"), T0 + i).await);
    }
    let globex = insert(store, keyed("globex"), T0).await;
    let plain = insert(store, new_task("mail"), T0).await;

    let report = poll(store, T0 + 10).await;
    assert_eq!((report.key_paced, report.paced), (3, 0), "{report:?}");
    assert_eq!(
        report.limited,
        [(("mail".to_owned(), Limit::KeyRate), 3)].into()
    );
    let mut first: Vec<String> = report.enqueued.iter().map(|t| t.id.clone()).collect();
    first.sort();
    assert_eq!(first, sorted(&[&acme[0], &acme[1], &globex, &plain]));
    for (i, id) in acme[2..].iter().enumerate() {
        let task = store.task_get(id).await.unwrap().unwrap();
        assert_eq!(
            (
                task.status,
                task.key_paced,
                task.paced,
                task.next_trigger_at,
                task.attempt
            ),
            (
                TaskStatus::New,
                true,
                false,
                Some(T0 + 510 + 500 * i as i64),
                0
            ),
            "{task:#?}"
        );
    }
    // The overview counts them apart from the ready tasks.
    let stats = store.lambda_stats(T0 + 20, T0).await.unwrap();
    let mail = stats.iter().find(|s| s.lambda == "mail").unwrap();
    let ready: u64 = mail.ready.iter().map(|d| d.count).sum();
    assert_eq!((mail.paced, mail.waiting, ready), (3, 0, 4), "{mail:?}");
    assert!(enqueued(store, T0 + 509).await.is_empty());
    assert_eq!(enqueued(store, T0 + 510).await, [acme[2].clone()]);
    // Both later slots have come: both go, neither takes another slot.
    assert_eq!(
        enqueued(store, T0 + 1510).await,
        sorted(&[&acme[3], &acme[4]])
    );
    let gone = store.task_get(&acme[4]).await.unwrap().unwrap();
    assert_eq!((gone.status, gone.key_paced), (TaskStatus::Enqueued, false));

    // A second after its last slot the bucket is full again.
    let later: Vec<String> = {
        let mut ids = Vec::new();
        for i in 0..3 {
            ids.push(insert(store, keyed("acme"), T0 + 2_600 + i).await);
        }
        ids
    };
    let report = poll(store, T0 + 2_610).await;
    assert_eq!((report.enqueued.len(), report.key_paced), (2, 1));
    let waiting = store.task_get(&later[2]).await.unwrap().unwrap();
    assert_eq!(waiting.next_trigger_at, Some(T0 + 3_110));
}

/// A task takes its key's slot first and its lambda's quota slot only when
/// the key's has come: a key's backlog waiting for its rate spends none of
/// the quota the lambda's other tasks need; a task given its key's slot
/// that then waits for its quota keeps its key's slot.
pub async fn a_rate_and_a_quota_take_their_slots_in_turn(store: &dyn TaskStore) {
    let config = LambdaConfig {
        quota_per_sec: Some(10.0),
        ..rated(1, Duration::from_secs(1))
    };
    deploy_with(store, "mail", config).await;
    let mut keyed_ids = BTreeMap::new();
    for (i, key) in ["acme", "globex"].into_iter().enumerate() {
        for j in 0..3 {
            let id = insert(store, keyed(key), T0 + (3 * i + j) as i64).await;
            keyed_ids.entry(key).or_insert_with(Vec::new).push(id);
        }
    }
    let report = poll(store, T0 + 10).await;
    assert_eq!(
        (report.enqueued.len(), report.key_paced, report.paced),
        (2, 4, 0),
        "{report:?}"
    );
    // The quota's burst is ten slots a second: two taken at T0 + 10, nine
    // more by T0 + 20; the tenth plain task waits for T0 + 110.
    let plain: Vec<NewTask> = (0..10).map(|_| new_task("mail")).collect();
    store
        .task_insert_many(TaskInsertMany {
            tasks: plain,
            now: T0 + 20,
        })
        .await
        .unwrap();
    let report = poll(store, T0 + 20).await;
    assert_eq!(
        (report.enqueued.len(), report.paced, report.key_paced),
        (9, 1, 0),
        "{report:?}"
    );
    assert_eq!(
        report.limited,
        [(("mail".to_owned(), Limit::Quota), 1)].into()
    );
    // At their keys' slots the keys' other tasks take the quota's next
    // slots, and go.
    for (at, nth) in [(T0 + 1_010, 1), (T0 + 2_010, 2)] {
        let due = sorted(&[&keyed_ids["acme"][nth], &keyed_ids["globex"][nth]]);
        let mut gone = enqueued(store, at).await;
        gone.retain(|id| due.contains(id));
        assert_eq!(gone, due, "at {at}");
    }

    // Under a quota of one an hour, a task whose key's slot has come waits
    // for its quota slot and keeps the key's: it takes no second one.
    let config = LambdaConfig {
        quota_per_sec: Some(LambdaConfig::MIN_QUOTA_PER_SEC),
        ..rated(1, Duration::from_secs(1))
    };
    deploy_with(store, "slow", config).await;
    let slow = |key: &str| NewTask {
        key: Some(key.into()),
        ..new_task("slow")
    };
    // (Before `mail`'s tasks' messages expire.)
    let now = T0 + 30_000;
    let first = insert(store, slow("initech"), now).await;
    let next = insert(store, slow("initech"), now + 1).await;
    let report = poll(store, now + 10).await;
    assert_eq!(
        (report.enqueued.len(), report.paced, report.key_paced),
        (1, 0, 1),
        "{report:?}"
    );
    assert_eq!(report.enqueued[0].id, first);
    let waiting = store.task_get(&next).await.unwrap().unwrap();
    assert!(waiting.key_paced && !waiting.paced, "{waiting:#?}");
    let report = poll(store, now + 1_010).await;
    assert_eq!(
        (report.enqueued.len(), report.paced, report.key_paced),
        (0, 1, 0),
        "{report:?}"
    );
    let waiting = store.task_get(&next).await.unwrap().unwrap();
    assert!(waiting.key_paced && waiting.paced, "{waiting:#?}");
}

/// Four consumers polling at once share each key's bucket: together they
/// start no more of a key than one consumer would, and one more of each a
/// token later.
pub async fn racing_consumers_share_a_keys_bucket(store: &dyn TaskStore) {
    deploy_with(store, "mail", rated(3, Duration::from_secs(60))).await;
    // The keys' buckets exist already (full again a period later), and
    // each poll has a connection of its own: the polls below race over
    // rows, not over creating them or connecting.
    for key in ["acme", "globex"] {
        insert(store, keyed(key), T0 - 100_000).await;
    }
    let warm = futures::future::join_all((0..4).map(|_| poll(store, T0 - 100_000))).await;
    assert_eq!(warm.iter().map(|r| r.enqueued.len()).sum::<usize>(), 2);
    let tasks = (0..80)
        .map(|i| keyed(if i % 2 == 0 { "acme" } else { "globex" }))
        .collect();
    store
        .task_insert_many(TaskInsertMany { tasks, now: T0 })
        .await
        .unwrap();
    for (now, expected) in [(T0, 3), (T0 + 20_000, 1), (T0 + 39_999, 0)] {
        let polls = (0..4).map(|_| {
            store.task_enqueue_ready(TaskEnqueueReady {
                now,
                limit: 20,
                enqueue_timeout: ENQUEUE_TIMEOUT,
            })
        });
        let mut per_key: BTreeMap<Option<String>, usize> = BTreeMap::new();
        for report in futures::future::join_all(polls).await {
            for task in report.unwrap().enqueued {
                let task = store.task_get(&task.id).await.unwrap().unwrap();
                *per_key.entry(task.key).or_default() += 1;
            }
        }
        for key in ["acme", "globex"] {
            assert_eq!(
                per_key.get(&Some(key.to_owned())).copied().unwrap_or(0),
                expected,
                "at {now}: {per_key:?}"
            );
        }
    }
}

/// A redeploy or a rollback paces the waiting tasks afresh under the new
/// rate, or lets them go when it has none.
pub async fn a_redeploy_repaces_rated_tasks(store: &dyn TaskStore) {
    deploy_with(store, "mail", rated(1, Duration::from_secs(3600))).await;
    for i in 0..4 {
        insert(store, keyed("acme"), T0 + i).await;
    }
    assert_eq!(poll(store, T0 + 10).await.key_paced, 3);
    assert!(enqueued(store, T0 + 20).await.is_empty());
    deploy_with(store, "mail", rated(2, Duration::from_secs(1))).await;
    let report = poll(store, T0 + 30).await;
    assert_eq!((report.enqueued.len(), report.key_paced), (2, 1));
    deploy_with(store, "mail", config()).await;
    assert_eq!(enqueued(store, T0 + 40).await.len(), 1);

    // A rollback to the hourly rate paces the next ones under it again.
    for i in 0..2 {
        insert(store, keyed("globex"), T0 + 50 + i).await;
    }
    store
        .lambda_rollback(waft_store::LambdaRollback {
            name: "mail".into(),
            to: Some(1),
            now: T0 + 60,
        })
        .await
        .unwrap();
    let report = poll(store, T0 + 70).await;
    assert_eq!((report.enqueued.len(), report.key_paced), (1, 1));
}
