//! Tasks as clients read them: lists by filter and page (kept to a token's
//! lambdas, by creation time, both ways), counts per status, and the
//! per-lambda overview. Apart from `tasks.rs` because every check here
//! writes a set of tasks only to read it back many ways, with the paging
//! helper they share.

use waft_core::{LambdaConfig, TaskStatus};
use waft_store::{
    Depth, GateSet, GateState, LambdaStats, Millis, NewTask, ResultOutcome, StatusCount,
    StoreError, TaskCount, TaskList, TaskStore,
};

use crate::support::*;

pub async fn lists_filter_and_page(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    deploy(store, "other").await;
    let parent = insert(store, new_task("mail"), T0).await;
    let mut children = Vec::new();
    for _ in 0..5 {
        children.push(
            insert(
                store,
                NewTask {
                    parent_id: Some(parent.clone()),
                    ..new_task("mail")
                },
                T0,
            )
            .await,
        );
    }
    insert(store, new_task("other"), T0).await;

    let by_parent = TaskList {
        parent_id: Some(parent.clone()),
        limit: 2,
        ..TaskList::default()
    };
    children.sort();
    assert_eq!(paged(store, by_parent).await, children);
    let mail = TaskList {
        lambda: Some("mail".into()),
        ..TaskList::default()
    };
    assert_eq!(store.task_list(mail).await.unwrap().len(), 6);
    let new = TaskList {
        status: Some(TaskStatus::New),
        ..TaskList::default()
    };
    assert_eq!(store.task_list(new).await.unwrap().len(), 7);
    let child = store.task_get(&children[0]).await.unwrap().unwrap();
    assert_eq!(child.parent_id.as_deref(), Some(parent.as_str()));
}

/// A task's key is kept as given (any text a Rust string may hold), lists
/// and counts filter by it within a lambda, and a key out of bounds is
/// refused with nothing written.
pub async fn keys_round_trip_and_filter(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    deploy(store, "other").await;
    let keyed = |lambda: &str, key: &str| NewTask {
        key: Some(key.into()),
        ..new_task(lambda)
    };
    let odd = "a\0b\\0c\\é€😀 \n";
    let mut acme = Vec::new();
    for _ in 0..3 {
        acme.push(insert(store, keyed("mail", "acme"), T0).await);
    }
    let odd_id = insert(store, keyed("mail", odd), T0).await;
    let plain = insert(store, new_task("mail"), T0).await;
    insert(store, keyed("other", "acme"), T0).await;

    let got = store.task_get(&odd_id).await.unwrap().unwrap();
    assert_eq!(got.key.as_deref(), Some(odd));
    assert_eq!(store.task_get(&plain).await.unwrap().unwrap().key, None);

    let by_key = |key: &str| TaskList {
        lambda: Some("mail".into()),
        key: Some(key.into()),
        limit: 2,
        ..TaskList::default()
    };
    acme.sort();
    assert_eq!(paged(store, by_key("acme")).await, acme);
    assert_eq!(paged(store, by_key(odd)).await, vec![odd_id.clone()]);
    // The NUL is part of the key: its prefix is another key.
    assert!(paged(store, by_key("a")).await.is_empty());
    let every_lambda = TaskList {
        key: Some("acme".into()),
        ..TaskList::default()
    };
    assert_eq!(store.task_list(every_lambda).await.unwrap().len(), 4);

    let count = |key: &str| TaskCount {
        lambda: "mail".into(),
        key: Some(key.into()),
        ..TaskCount::default()
    };
    assert_eq!(
        store.task_count(count("acme")).await.unwrap(),
        vec![StatusCount {
            status: TaskStatus::New,
            count: 3
        }]
    );
    assert_eq!(store.task_count(count(odd)).await.unwrap()[0].count, 1);

    for bad in [String::new(), "k".repeat(256)] {
        let refused = store
            .task_insert_many(waft_store::TaskInsertMany {
                tasks: vec![new_task("mail"), keyed("mail", &bad)],
                now: T0,
            })
            .await;
        assert!(
            matches!(&refused, Err(StoreError::Invalid(m)) if m.contains("key")),
            "{refused:?}"
        );
    }
    assert!(paged(store, by_key(&"k".repeat(255))).await.is_empty());
    let all_mail = TaskList {
        lambda: Some("mail".into()),
        ..TaskList::default()
    };
    assert_eq!(store.task_list(all_mail).await.unwrap().len(), 5);
}

/// A list kept to some lambdas (a token's) fills its pages with their tasks
/// alone, however many of other lambdas' lie between, both ways; with no
/// lambda, it is empty.
pub async fn lists_keep_to_the_lambdas_given(store: &dyn TaskStore) {
    for name in ["mail", "billing", "other"] {
        deploy(store, name).await;
    }
    // Three tasks of others for each of mail's and billing's, each created
    // a millisecond after the last, so ids follow creation.
    let mut kept = Vec::new();
    for i in 0..40 {
        let lambda = match i % 8 {
            3 => "mail",
            7 => "billing",
            _ => "other",
        };
        let id = insert(store, new_task(lambda), T0 + i).await;
        if lambda != "other" {
            kept.push(id);
        }
    }
    let scoped = TaskList {
        lambdas: Some(vec!["mail".into(), "billing".into()]),
        limit: 3,
        ..TaskList::default()
    };
    let first = store.task_list(scoped.clone()).await.unwrap();
    assert_eq!(first.len(), 3, "a full page");
    assert_eq!(paged(store, scoped.clone()).await, kept);
    let newest = TaskList {
        newest_first: true,
        ..scoped.clone()
    };
    let mut reversed = kept.clone();
    reversed.reverse();
    assert_eq!(paged(store, newest).await, reversed);
    // With another filter, both hold.
    let mail = TaskList {
        lambda: Some("mail".into()),
        ..scoped.clone()
    };
    assert_eq!(paged(store, mail).await.len(), 5);
    let outside = TaskList {
        lambda: Some("other".into()),
        ..scoped.clone()
    };
    assert!(store.task_list(outside).await.unwrap().is_empty());
    let none = TaskList {
        lambdas: Some(Vec::new()),
        ..TaskList::default()
    };
    assert!(store.task_list(none).await.unwrap().is_empty());
}

/// Counts per status follow the tasks through their states, filtered by
/// lambda, collection and parent, and agree with the lists.
pub async fn counts_follow_statuses(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    deploy(store, "other").await;
    let count = |collection: Option<&str>, parent: Option<&str>| TaskCount {
        lambda: "mail".into(),
        collection: collection.map(str::to_owned),
        parent_id: parent.map(str::to_owned),
        ..TaskCount::default()
    };
    assert_eq!(store.task_count(count(None, None)).await.unwrap(), vec![]);
    let parent = insert(store, new_task("mail"), T0).await;
    for collection in ["a", "a", "b"] {
        insert(
            store,
            NewTask {
                collection: Some(collection.into()),
                parent_id: Some(parent.clone()),
                ..new_task("mail")
            },
            T0 + 60_000,
        )
        .await;
    }
    insert(store, new_task("other"), T0).await;
    let counted = |status, count| StatusCount { status, count };
    assert_eq!(
        store.task_count(count(None, None)).await.unwrap(),
        vec![counted(TaskStatus::New, 4)]
    );
    let lease = start(store, &parent, T0).await;
    assert_eq!(
        store.task_count(count(None, None)).await.unwrap(),
        vec![
            counted(TaskStatus::New, 3),
            counted(TaskStatus::Processing, 1)
        ]
    );
    finish(
        store,
        &parent,
        lease,
        ResultOutcome::Success { output: None },
        T0 + 1,
    )
    .await
    .unwrap();
    assert_eq!(
        store.task_count(count(None, None)).await.unwrap(),
        vec![counted(TaskStatus::New, 3), counted(TaskStatus::Success, 1)]
    );
    assert_eq!(
        store.task_count(count(Some("a"), None)).await.unwrap(),
        vec![counted(TaskStatus::New, 2)]
    );
    assert_eq!(
        store
            .task_count(count(Some("b"), Some(&parent)))
            .await
            .unwrap(),
        vec![counted(TaskStatus::New, 1)]
    );
    // A filter no stored name could match finds nothing, not an error.
    assert_eq!(
        store.task_count(count(Some("b\0\\"), None)).await.unwrap(),
        vec![]
    );
    assert_eq!(
        store
            .task_count(count(Some("a"), Some("nobody")))
            .await
            .unwrap(),
        vec![]
    );
    let listed = store
        .task_list(TaskList {
            lambda: Some("mail".into()),
            status: Some(TaskStatus::New),
            ..TaskList::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.len(), 3);
    assert!(matches!(
        store
            .task_count(TaskCount {
                lambda: "not a name!".into(),
                ..TaskCount::default()
            })
            .await,
        Err(StoreError::InvalidName(_))
    ));
}

/// A range of creation times lists the tasks created in it, oldest or
/// newest first, page by page; times no task can have find none.
pub async fn lists_by_creation_time_both_ways(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let mut ids = Vec::new();
    for minute in 0..6 {
        ids.push(insert(store, new_task("mail"), T0 + minute * 60_000).await);
    }
    let range = TaskList {
        lambda: Some("mail".into()),
        created_from: Some(T0 + 60_000),
        created_before: Some(T0 + 240_000),
        limit: 2,
        ..TaskList::default()
    };
    assert_eq!(paged(store, range.clone()).await, ids[1..4]);
    let newest = TaskList {
        newest_first: true,
        ..range.clone()
    };
    let mut reversed = ids[1..4].to_vec();
    reversed.reverse();
    assert_eq!(paged(store, newest).await, reversed);
    let everything = TaskList {
        newest_first: true,
        limit: 2,
        ..TaskList::default()
    };
    let mut all = ids.clone();
    all.reverse();
    assert_eq!(paged(store, everything).await, all);
    for (from, before) in [
        (Some(i64::MAX), None),
        (None, Some(-5)),
        (Some(T0), Some(T0)),
    ] {
        let none = TaskList {
            created_from: from,
            created_before: before,
            ..TaskList::default()
        };
        assert_eq!(
            store.task_list(none).await.unwrap(),
            vec![],
            "{from:?}..{before:?}"
        );
    }
}

/// The overview counts every lambda's tasks where they are: ready per
/// priority with the oldest due time, waiting, held, running, dead, and
/// the executions that ended in the window.
pub async fn lambda_stats_follow_the_tasks(store: &dyn TaskStore) {
    let three = LambdaConfig {
        priorities: 3,
        max_attempts: 1,
        ..config()
    };
    deploy_with(store, "mail", three).await;
    deploy(store, "other").await;
    deploy(store, "idle").await;
    assert_eq!(store.lambda_stats(T0, T0 - 1).await.unwrap(), vec![]);

    let running = insert(store, new_task("mail"), T0).await;
    start(store, &running, T0).await;
    let done = insert(store, new_task("mail"), T0).await;
    let lease = start(store, &done, T0).await;
    let success = ResultOutcome::Success { output: None };
    finish(store, &done, lease, success, T0 + 5).await.unwrap();
    let failing = insert(store, new_task("mail"), T0).await;
    let lease = start(store, &failing, T0).await;
    finish(store, &failing, lease, retriable("no"), T0 + 5)
        .await
        .unwrap();
    let priority = |p: u8, due: Millis| NewTask {
        priority: Some(p),
        run_at: Some(due),
        ..new_task("mail")
    };
    insert(store, priority(0, T0 + 20), T0).await;
    insert(store, priority(0, T0 + 10), T0).await;
    insert(store, priority(2, T0 + 30), T0).await;
    insert(store, priority(2, T0 + 60_000), T0).await;
    store
        .gate_set(GateSet {
            lambda: "other".into(),
            collection: None,
            state: GateState::Paused,
            now: T0,
        })
        .await
        .unwrap();
    insert(store, new_task("other"), T0).await;
    poll(store, T0 + 100).await;

    let stats = store.lambda_stats(T0 + 1000, T0).await.unwrap();
    let mail = LambdaStats {
        lambda: "mail".into(),
        ready: vec![
            Depth {
                priority: 0,
                count: 2,
                oldest_due: T0 + 10,
            },
            Depth {
                priority: 2,
                count: 1,
                oldest_due: T0 + 30,
            },
        ],
        waiting: 1,
        held: 0,
        parked: 0,
        paced: 0,
        suspended: 0,
        waiting_for_signal: 0,
        waiting_for_children: 0,
        running: 1,
        dead: 1,
        succeeded: 1,
        failed: 1,
    };
    let other = LambdaStats {
        lambda: "other".into(),
        held: 1,
        ..LambdaStats::default()
    };
    assert_eq!(stats, vec![mail.clone(), other.clone()]);
    // Executions that ended before the window are not counted.
    let later = store.lambda_stats(T0 + 1000, T0 + 6).await.unwrap();
    assert_eq!(
        later,
        vec![
            LambdaStats {
                succeeded: 0,
                failed: 0,
                ..mail
            },
            other
        ]
    );
}

/// Every id of a list, page after page, each page within the list's limit.
async fn paged(store: &dyn TaskStore, list: TaskList) -> Vec<String> {
    let mut seen = Vec::new();
    let mut page = store.task_list(list.clone()).await.unwrap();
    while !page.is_empty() {
        assert!(page.len() <= list.limit as usize, "a page over the limit");
        seen.extend(page.iter().map(|t| t.id.clone()));
        let after = page.last().map(|t| t.id.clone());
        page = store
            .task_list(TaskList {
                after,
                ..list.clone()
            })
            .await
            .unwrap();
    }
    seen
}
