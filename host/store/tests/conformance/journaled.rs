//! The journals of a lambda's live tasks, read a page at a time for a
//! check of new code against them: each task whole, in id order, only live
//! tasks of that lambda that hold a journal, with the version that wrote it.
//! And the move of the tasks a check found clean, each only as it was
//! checked.

use waft_store::{
    Checked, JournalWrite, JournaledTask, JournaledTasks, ResultOutcome, TaskMove, TaskStore,
};

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

/// Every journaled live task of `mail`, in one page.
async fn all_of_mail(store: &dyn TaskStore) -> Vec<JournaledTask> {
    store
        .task_journals(JournaledTasks {
            lambda: "mail".into(),
            after: None,
            limit: 10,
        })
        .await
        .unwrap()
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

    let whole = all_of_mail(store).await;
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

/// A move takes a task to the version checked only as it was checked: a
/// task claimed since (its lease changed) or written to stays on the
/// version it had, and runs on it whole; one moved is claimed on its new
/// version. Nothing moves a running task.
pub async fn a_move_takes_only_tasks_as_they_were_checked(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(insert(store, new_task("mail"), T0).await);
    }
    ids.sort();
    let leases = start_all(store).await;
    for id in &ids {
        journaled(store, id, leases[id], 2).await;
    }
    let (waiting, claimed, running) = (&ids[0], &ids[1], &ids[2]);
    for id in [waiting, claimed] {
        let retried = finish(store, id, leases[id], crate::journal::retry_now(), T0 + 1).await;
        assert_eq!(retried, Ok(waft_core::TaskStatus::RetriableFailure));
    }
    deploy(store, "mail").await;
    let checked: Vec<Checked> = all_of_mail(store)
        .await
        .into_iter()
        .map(|t| Checked {
            journal_len: u32::try_from(t.entries.len()).unwrap(),
            lease_token: t.task.lease_token,
            id: t.task.id,
        })
        .collect();
    assert_eq!(checked.len(), 3);

    // Both due again; one claimed between the check and the move: it runs
    // on version 1.
    let report = poll(store, T0 + 10).await;
    let token = |id: &str| {
        let queued = report.enqueued.iter().find(|t| t.id == id);
        queued.expect("due again").enqueue_token
    };
    let on_1 = claim(store, claimed, token(claimed), T0 + 10)
        .await
        .unwrap();
    assert_eq!(on_1.lambda_version, 1);
    let moved = store
        .task_move(TaskMove {
            lambda: "mail".into(),
            to: 2,
            tasks: checked.clone(),
        })
        .await
        .unwrap();
    assert_eq!(moved, 1, "only the task still waiting as it was checked");
    let versions: Vec<(String, Option<u32>)> = all_of_mail(store)
        .await
        .into_iter()
        .map(|t| (t.task.id, t.journal_version))
        .collect();
    let expected = [
        (waiting.clone(), Some(2)),
        (claimed.clone(), Some(1)),
        // Running as it was checked: a move never takes a running task.
        (running.clone(), Some(1)),
    ];
    assert_eq!(versions, expected);
    // The one moved, queued, is claimed on version 2, with its journal.
    let on_2 = claim(store, waiting, token(waiting), T0 + 20)
        .await
        .unwrap();
    assert_eq!((on_2.lambda_version, on_2.journal_len), (2, 2));
    // A move as another lambda's, or to a task changed since, moves nothing.
    let other = TaskMove {
        lambda: "other".into(),
        to: 2,
        tasks: checked,
    };
    assert_eq!(store.task_move(other).await.unwrap(), 0);
}
