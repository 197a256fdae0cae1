//! Journal generations: a task's children are named by its journal's
//! generation and their rank, so every way of discarding a journal — a
//! redrive `--fresh`, a redrive onto a version, an execution restarting on
//! a divergence — starts a new generation, and keeping the journal keeps
//! it.

use waft_core::{LambdaConfig, TaskStatus};
use waft_store::{
    DeadRedrive, DeadSelector, JournalWrite, StoreError, TaskJournalWrite, TaskStore,
};

use crate::journal::{claim_due, entries, journal, retry_now, write};
use crate::support::*;

/// Claims tasks `ids` (due at `now`), writes two entries to each one's
/// journal, and fails each for good: the generations they were claimed
/// with.
async fn run_to_death(store: &dyn TaskStore, ids: &[&String], now: i64) -> Vec<u32> {
    let report = poll(store, now).await;
    let mut generations = Vec::new();
    for id in ids {
        let queued = report.enqueued.iter().find(|t| t.id == **id);
        let token = queued.expect("enqueued").enqueue_token;
        let claimed = claim(store, id, token, now).await.unwrap();
        let two = JournalWrite {
            from: 0,
            entries: entries(0, 2, id),
        };
        let written = write(store, id, claimed.lease_token, claimed.lambda_version, two).await;
        assert_eq!(written.unwrap(), Ok(()));
        let ended = finish(store, id, claimed.lease_token, retry_now(), now).await;
        assert_eq!(ended, Ok(TaskStatus::Dead), "{id}");
        generations.push(claimed.journal_generation);
    }
    generations
}

/// A task starts at generation 0; each redrive that discards its journal
/// (fresh, onto a version, by id or by filter) moves it on by one, and a
/// redrive that keeps the journal keeps it.
pub async fn each_discarded_journal_starts_a_new_generation(store: &dyn TaskStore) {
    let once = LambdaConfig {
        max_attempts: 1,
        ..config()
    };
    deploy_with(store, "mail", once).await;
    let task = |collection: &str| waft_store::NewTask {
        collection: Some(collection.into()),
        ..new_task("mail")
    };
    let kept = insert(store, task("default"), T0).await;
    let fresh = insert(store, task("default"), T0).await;
    let pinned = insert(store, task("default"), T0).await;
    let by_filter = insert(store, task("a"), T0).await;
    let all = [&kept, &fresh, &pinned, &by_filter];
    assert_eq!(run_to_death(store, &all, T0).await, [0; 4], "new tasks'");

    let ids = |id: &String| DeadSelector::Ids(vec![id.clone()]);
    let redrive = |selector, version, fresh, now| DeadRedrive {
        selector,
        version,
        fresh,
        now,
    };
    let filter = DeadSelector::Filter {
        lambda: "mail".into(),
        collection: Some("a".into()),
    };
    for (selector, version, is_fresh) in [
        (ids(&kept), None, false),
        (ids(&fresh), None, true),
        (ids(&pinned), Some(1), false),
        (filter, None, true),
    ] {
        let redriven = store.dead_redrive(redrive(selector, version, is_fresh, T0 + 1));
        assert_eq!(redriven.await.unwrap(), 1);
    }
    // kept, fresh, pinned, by filter
    assert_eq!(run_to_death(store, &all, T0 + 1).await, [0, 1, 1, 1]);

    // Again: each discard counts, and a kept journal keeps its generation.
    for (id, is_fresh) in [(&kept, false), (&fresh, true)] {
        let redriven = store.dead_redrive(redrive(ids(id), None, is_fresh, T0 + 2));
        assert_eq!(redriven.await.unwrap(), 1);
    }
    assert_eq!(run_to_death(store, &[&kept, &fresh], T0 + 2).await, [0, 2]);
}

/// An execution that discards the journal sends the new generation with
/// the fresh journal's first write, from entry 0: stored with it, in its
/// transaction, and kept by the writes and attempts that follow. A write
/// from past 0 cannot carry one, and a write the lease refuses stores
/// none.
pub async fn a_fresh_journals_first_write_stores_its_generation(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let id = insert(store, new_task("mail"), T0).await;
    let first = claim_due(store, &id, T0).await;
    assert_eq!(first.journal_generation, 0);
    let lease = first.lease_token;
    let two = JournalWrite {
        from: 0,
        entries: entries(0, 2, &id),
    };
    assert_eq!(write(store, &id, lease, 1, two).await.unwrap(), Ok(()));

    let at = |from, generation| TaskJournalWrite {
        id: id.clone(),
        lease_token: lease,
        version: 1,
        write: JournalWrite {
            from,
            entries: Vec::new(),
        },
        part: None,
        generation: Some(generation),
    };
    let past_zero = store.task_journal_write(at(1, 1)).await;
    assert!(
        matches!(past_zero, Err(StoreError::Invalid(_))),
        "{past_zero:?}"
    );
    let stale = TaskJournalWrite {
        lease_token: lease - 1,
        ..at(0, 5)
    };
    assert!(store.task_journal_write(stale).await.unwrap().is_err());
    assert_eq!(store.task_journal_write(at(0, 1)).await.unwrap(), Ok(()));
    assert!(journal(store, &id).await.is_empty(), "the journal is cut");
    // The fresh run's next write carries none, and keeps it.
    let one = JournalWrite {
        from: 0,
        entries: entries(0, 1, &id),
    };
    assert_eq!(write(store, &id, lease, 1, one).await.unwrap(), Ok(()));

    let ended = finish(store, &id, lease, retry_now(), T0).await;
    assert_eq!(ended, Ok(TaskStatus::RetriableFailure));
    let second = claim_due(store, &id, T0 + 10).await;
    assert_eq!((second.journal_len, second.journal_generation), (1, 1));
}
