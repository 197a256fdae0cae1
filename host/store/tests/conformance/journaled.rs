//! The journals of a lambda's live tasks, read a page at a time for a
//! check of new code against them: each task whole, in id order, only live
//! tasks of that lambda that hold a journal, with the version that wrote it.

use waft_store::{JournalWrite, JournaledTasks, ResultOutcome, TaskStore};

use crate::journal::{entries, write};
use crate::support::*;

async fn page(store: &dyn TaskStore, after: Option<&str>, limit: u32) -> Vec<(String, usize)> {
    store
        .task_journals(JournaledTasks {
            lambda: "mail".into(),
            after: after.map(str::to_owned),
            limit,
        })
        .await
        .unwrap()
        .into_iter()
        .map(|t| (t.task.id, t.entries.len()))
        .collect()
}

/// Claims every due task of the poll at `T0`: their leases, by id.
async fn start_all(store: &dyn TaskStore) -> std::collections::HashMap<String, i64> {
    let mut leases = std::collections::HashMap::new();
    for queued in poll(store, T0).await.enqueued {
        let claimed = claim(store, &queued.id, queued.enqueue_token, T0)
            .await
            .unwrap();
        leases.insert(queued.id, claimed.lease_token);
    }
    leases
}

/// Writes `count` entries to task `id`'s journal under `lease`.
async fn journaled(store: &dyn TaskStore, id: &str, lease: i64, count: u32) {
    let written = JournalWrite {
        from: 0,
        entries: entries(0, count, id),
    };
    assert_eq!(write(store, id, lease, 1, written).await.unwrap(), Ok(()));
}

pub async fn live_journals_are_read_a_page_at_a_time(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    deploy(store, "other").await;
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(insert(store, new_task("mail"), T0).await);
    }
    ids.sort();
    let elsewhere = insert(store, new_task("other"), T0).await;
    let (a, b, c, ended) = (&ids[0], &ids[1], &ids[2], &ids[3]);
    let leases = start_all(store).await;
    journaled(store, a, leases[a], 3).await;
    // Running without a journal: nothing to check (`b`).
    assert!(leases.contains_key(b));
    journaled(store, c, leases[c], 2).await;
    // Ended for good with a journal: nothing waits on it.
    journaled(store, ended, leases[ended], 4).await;
    let success = ResultOutcome::Success { output: None };
    finish(store, ended, leases[ended], success, T0)
        .await
        .unwrap();
    // Another lambda's.
    journaled(store, &elsewhere, leases[&elsewhere], 1).await;

    let whole = store
        .task_journals(JournaledTasks {
            lambda: "mail".into(),
            after: None,
            limit: 10,
        })
        .await
        .unwrap();
    let read: Vec<_> = whole
        .iter()
        .map(|t| (t.task.id.as_str(), t.entries.clone()))
        .collect();
    assert_eq!(
        read,
        [
            (a.as_str(), entries(0, 3, a)),
            (c.as_str(), entries(0, 2, c))
        ]
    );
    assert!(whole.iter().all(|t| t.journal_version == Some(1)));

    // A page at a time, each after the last one's last task.
    assert_eq!(page(store, None, 1).await, [(a.clone(), 3)]);
    assert_eq!(page(store, Some(a), 1).await, [(c.clone(), 2)]);
    assert!(page(store, Some(c), 1).await.is_empty());
    assert!(
        page(store, Some(a), 0).await.len() == 1,
        "a limit of 0 reads one"
    );
}
