//! Journals and lambda versions: a journal is replayed on the version that
//! wrote it, so it pins its task to that version until a redrive discards
//! it, and garbage collection keeps the version; and what a lambda does on
//! a divergence is kept with each version.

use std::time::Duration;

use waft_core::{LambdaConfig, OnDivergence, TaskStatus};
use waft_store::{
    DeadRedrive, DeadSelector, JournalWrite, LambdaGc, LambdaRollback, NewTask, ResultOutcome,
    TaskStore,
};

use crate::journal::{claim_due, entries, finish_with, journal, retry_now, write};
use crate::support::*;

/// Two entries written alone under `lease`, as version `version`.
async fn write_two(store: &dyn TaskStore, id: &str, lease: i64, version: u32) {
    let two = JournalWrite {
        from: 0,
        entries: entries(0, 2, id),
    };
    let written = write(store, id, lease, version, two).await;
    assert_eq!(written.unwrap(), Ok(()));
}

/// A task whose journal holds entries is claimed at the version that wrote
/// them, whatever was deployed since; one without, at the current version.
/// A journal written with a result pins the version its lease was claimed
/// with, even when a deploy came between; a journal cut to nothing pins
/// nothing.
pub async fn a_journal_pins_its_version(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let journaled = insert(store, new_task("mail"), T0).await;
    let first = claim_due(store, &journaled, T0).await;
    assert_eq!((first.lambda_version, first.journal_len), (1, 0));
    write_two(store, &journaled, first.lease_token, 1).await;
    let plain = insert(store, new_task("mail"), T0).await;
    let other = claim_due(store, &plain, T0).await;
    for (id, lease) in [(&journaled, first.lease_token), (&plain, other.lease_token)] {
        let retried = finish(store, id, lease, retry_now(), T0 + 1).await;
        assert_eq!(retried, Ok(TaskStatus::RetriableFailure));
    }
    deploy(store, "mail").await;
    let report = poll(store, T0 + 10).await;
    assert_eq!(report.enqueued.len(), 2);
    let mut claimed = Vec::new();
    for queued in &report.enqueued {
        let task = claim(store, &queued.id, queued.enqueue_token, T0 + 10).await;
        claimed.push(task.unwrap());
    }
    for task in &claimed {
        let expected = if task.id == journaled { (1, 2) } else { (2, 0) };
        assert_eq!(
            (task.lambda_version, task.journal_len),
            expected,
            "{}",
            task.id
        );
    }

    // Claimed at version 2; version 3 comes before its result, which
    // carries the journal's first entry: the journal is version 2's.
    let late = insert(store, new_task("mail"), T0 + 20).await;
    let claim_2 = claim_due(store, &late, T0 + 20).await;
    assert_eq!(claim_2.lambda_version, 2);
    deploy(store, "mail").await;
    let first_entry = JournalWrite {
        from: 0,
        entries: entries(0, 1, "late"),
    };
    let retried = finish_with(
        store,
        &late,
        claim_2.lease_token,
        retry_now(),
        Some(first_entry),
        0,
        T0 + 21,
    );
    assert_eq!(retried.await.unwrap(), Ok(TaskStatus::RetriableFailure));
    let again = claim_due(store, &late, T0 + 30).await;
    assert_eq!((again.lambda_version, again.journal_len), (2, 1));

    // Cut to nothing with its result: the next attempt runs version 3.
    let journaled_lease = claimed.iter().find(|t| t.id == journaled).unwrap();
    let cut = finish_with(
        store,
        &journaled,
        journaled_lease.lease_token,
        retry_now(),
        Some(JournalWrite::default()),
        2,
        T0 + 31,
    );
    assert_eq!(cut.await.unwrap(), Ok(TaskStatus::RetriableFailure));
    let fresh = claim_due(store, &journaled, T0 + 40).await;
    assert_eq!((fresh.lambda_version, fresh.journal_len), (3, 0));
}

fn versions_left(versions: Vec<waft_store::LambdaVersion>) -> Vec<u32> {
    versions.iter().map(|v| v.lambda.version).collect()
}

/// Garbage collection keeps the version a live task's journal needs, and
/// the version a running execution was claimed with (its result may pin
/// its journal to it); once those tasks end, their versions go.
pub async fn gc_keeps_the_versions_journals_need(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let journaled = insert(store, new_task("mail"), T0).await;
    let first = claim_due(store, &journaled, T0).await;
    write_two(store, &journaled, first.lease_token, 1).await;
    // Due again once the other task below has run its first attempt.
    let later = ResultOutcome::Retriable {
        error: "later".into(),
        retry_after: Some(Duration::from_secs(5)),
    };
    let retried = finish(store, &journaled, first.lease_token, later, T0 + 1).await;
    assert_eq!(retried, Ok(TaskStatus::RetriableFailure));
    deploy(store, "mail").await;
    deploy(store, "mail").await;
    let running = insert(store, new_task("mail"), T0 + 2).await;
    let at_3 = claim_due(store, &running, T0 + 2).await;
    assert_eq!(at_3.lambda_version, 3);
    deploy(store, "mail").await;
    deploy(store, "mail").await;
    let gc = LambdaGc {
        lambda: "mail".into(),
        keep: 1,
    };
    let report = store.lambda_gc(gc.clone()).await.unwrap();
    assert_eq!(report.versions, 2);
    let left = versions_left(store.lambda_versions("mail").await.unwrap());
    assert_eq!(left, [1, 3, 5]);

    // The running task's result pins its journal to version 3, which it
    // then runs again.
    let last = JournalWrite {
        from: 0,
        entries: entries(0, 1, "running"),
    };
    let retried = finish_with(
        store,
        &running,
        at_3.lease_token,
        retry_now(),
        Some(last),
        0,
        T0 + 3,
    );
    assert_eq!(retried.await.unwrap(), Ok(TaskStatus::RetriableFailure));
    let now = T0 + 10_000;
    let report = poll(store, now).await;
    assert_eq!(report.enqueued.len(), 2);
    for queued in &report.enqueued {
        let task = claim(store, &queued.id, queued.enqueue_token, now).await;
        let task = task.unwrap();
        let expected = if task.id == journaled { 1 } else { 3 };
        assert_eq!(task.lambda_version, expected, "{}", task.id);
        let done = finish(store, &task.id, task.lease_token, success(), now + 1).await;
        assert_eq!(done, Ok(TaskStatus::Success));
    }
    // Ended: nothing needs versions 1 and 3 any more.
    assert_eq!(store.lambda_gc(gc).await.unwrap().versions, 2);
    let left = versions_left(store.lambda_versions("mail").await.unwrap());
    assert_eq!(left, [5]);
}

/// Dead task `id` of `mail`, with a journal of two entries written by its
/// only attempt (the lambda allows one).
async fn dead_with_journal(store: &dyn TaskStore, collection: &str, now: i64) -> String {
    let task = NewTask {
        collection: Some(collection.into()),
        ..new_task("mail")
    };
    let id = insert(store, task, now).await;
    let lease = claim_due(store, &id, now).await.lease_token;
    write_two(store, &id, lease, 1).await;
    let ended = finish(store, &id, lease, retry_now(), now).await;
    assert_eq!(ended, Ok(TaskStatus::Dead));
    id
}

/// A redrive keeps a dead task's journal, and with it the version that
/// wrote it and that version's budget; a fresh redrive, or one onto a
/// version, discards the journal. By filter as by id.
pub async fn redrives_keep_or_discard_journals(store: &dyn TaskStore) {
    let budget = |max_attempts| LambdaConfig {
        max_attempts,
        ..config()
    };
    deploy_with(store, "mail", budget(1)).await;
    let kept = dead_with_journal(store, "default", T0).await;
    let fresh = dead_with_journal(store, "default", T0).await;
    let pinned = dead_with_journal(store, "default", T0).await;
    let by_filter = dead_with_journal(store, "a", T0).await;
    let kept_by_filter = dead_with_journal(store, "b", T0).await;
    deploy_with(store, "mail", budget(4)).await;

    let redrive = |selector, version, fresh| DeadRedrive {
        selector,
        version,
        fresh,
        now: T0 + 1,
    };
    let ids = |id: &String| DeadSelector::Ids(vec![id.clone()]);
    let filter = |collection: &str| DeadSelector::Filter {
        lambda: "mail".into(),
        collection: Some(collection.into()),
    };
    for (selector, version, is_fresh) in [
        (ids(&kept), None, false),
        (ids(&fresh), None, true),
        (ids(&pinned), Some(1), false),
        (filter("a"), None, true),
        (filter("b"), None, false),
    ] {
        let redriven = store.dead_redrive(redrive(selector, version, is_fresh));
        assert_eq!(redriven.await.unwrap(), 1);
    }
    // (id, version run, journal length, attempt budget)
    let expected = [
        (&kept, 1, 2, 1),
        (&fresh, 2, 0, 4),
        (&pinned, 1, 0, 1),
        (&by_filter, 2, 0, 4),
        (&kept_by_filter, 1, 2, 1),
    ];
    let report = poll(store, T0 + 1).await;
    assert_eq!(report.enqueued.len(), expected.len());
    for (id, version, len, budget) in expected {
        assert_eq!(journal(store, id).await.len(), len, "{id}");
        let task = store.task_get(id).await.unwrap().unwrap();
        assert_eq!(task.max_attempts, budget, "{id}");
        let queued = report.enqueued.iter().find(|t| t.id == *id).unwrap();
        let claimed = claim(store, id, queued.enqueue_token, T0 + 1)
            .await
            .unwrap();
        let seen = (claimed.lambda_version, claimed.journal_len);
        assert_eq!(seen, (version, len as u32), "{id}");
    }
}

/// What a lambda does on a divergence is kept with each version, read back
/// by every way of reading a lambda, and copied by a rollback.
pub async fn on_divergence_is_kept_per_version(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let restart = LambdaConfig {
        on_divergence: OnDivergence::Restart,
        ..config()
    };
    deploy_with(store, "mail", restart).await;
    let current = store.lambda_get("mail").await.unwrap().unwrap();
    assert_eq!(current.config.on_divergence, OnDivergence::Restart);
    let listed = store.lambda_list().await.unwrap();
    assert_eq!(listed[0].config.on_divergence, OnDivergence::Restart);
    let first = store.lambda_get_version("mail", 1).await.unwrap().unwrap();
    assert_eq!(first.config.on_divergence, OnDivergence::Fail);
    let all: Vec<_> = store
        .lambda_versions("mail")
        .await
        .unwrap()
        .iter()
        .map(|v| v.lambda.config.on_divergence)
        .collect();
    assert_eq!(all, [OnDivergence::Fail, OnDivergence::Restart]);
    for (to, expected) in [(1, OnDivergence::Fail), (2, OnDivergence::Restart)] {
        let back = store
            .lambda_rollback(LambdaRollback {
                name: "mail".into(),
                to: Some(to),
                now: T0,
            })
            .await
            .unwrap();
        assert_eq!(back.config.on_divergence, expected, "a copy of {to}");
    }
}

/// A task suspended across deploys needs the version that wrote its
/// journal: the versions' listing says so, and garbage collection keeps
/// it, however few versions it keeps.
pub async fn versions_show_and_keep_what_suspended_tasks_need(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let asleep = insert(store, new_task("mail"), T0).await;
    let run = claim_due(store, &asleep, T0).await;
    let sleep = ResultOutcome::Suspend {
        until: T0 + 7 * 86_400_000,
        wait: waft_store::Wait::Timer,
    };
    let journal = JournalWrite {
        from: 0,
        entries: entries(0, 1, "asleep"),
    };
    let suspended = finish_with(
        store,
        &asleep,
        run.lease_token,
        sleep,
        Some(journal),
        0,
        T0 + 1,
    );
    assert_eq!(suspended.await.unwrap(), Ok(TaskStatus::Suspended));
    deploy(store, "mail").await;
    deploy(store, "mail").await;
    let gc = LambdaGc {
        lambda: "mail".into(),
        keep: 1,
    };
    assert_eq!(store.lambda_gc(gc).await.unwrap().versions, 1);
    let uses: Vec<_> = store
        .lambda_versions("mail")
        .await
        .unwrap()
        .iter()
        .map(|v| (v.lambda.version, v.suspended, v.live))
        .collect();
    assert_eq!(uses, [(1, 1, 1), (3, 0, 0)]);
}
