//! Journals of durable tasks: written under the lease of the execution
//! that made the calls, alone or with its result, replaced from a point on,
//! read back in pages, and refused whole when malformed. Versions, redrives
//! and garbage collection as journals see them are `journal_versions.rs`.

use std::time::Duration;

use waft_core::TaskStatus;
use waft_store::{
    ClaimedTask, JournalEntry, JournalWrite, Millis, Refusal, ResultOutcome, StoreError,
    TaskJournalRead, TaskJournalWrite, TaskResult, TaskSetResultMany, TaskStore,
};

use crate::guarantees::AWKWARD;
use crate::support::*;

/// Entry `seq` of an execution's journal: its answer tells `tag` apart.
pub fn entry(seq: u32, tag: &str) -> JournalEntry {
    JournalEntry {
        seq,
        call: "wasi:clocks/wall-clock.now".into(),
        digest: vec![seq as u8; 32],
        answer: format!("{tag} {seq}").into_bytes(),
        summary: format!("now is {seq}"),
        outside: seq.is_multiple_of(2),
        attempt: 1,
        at: T0 + Millis::from(seq),
        took_us: u64::from(seq) * 3,
    }
}

/// Entries `from .. from + count`.
pub fn entries(from: u32, count: u32, tag: &str) -> Vec<JournalEntry> {
    (from..from + count).map(|seq| entry(seq, tag)).collect()
}

/// Writes to task `id`'s journal under `lease`, as version `version`.
pub async fn write(
    store: &dyn TaskStore,
    id: &str,
    lease: i64,
    version: u32,
    write: JournalWrite,
) -> Result<Result<(), Refusal>, StoreError> {
    store
        .task_journal_write(TaskJournalWrite {
            id: id.into(),
            lease_token: lease,
            version,
            write,
            part: None,
            generation: None,
        })
        .await
}

/// Task `id`'s whole journal.
pub async fn journal(store: &dyn TaskStore, id: &str) -> Vec<JournalEntry> {
    page(store, id, 0, 1000, false).await
}

async fn page(
    store: &dyn TaskStore,
    id: &str,
    from: u32,
    limit: u32,
    without_answers: bool,
) -> Vec<JournalEntry> {
    store
        .task_journal(TaskJournalRead {
            id: id.into(),
            from,
            limit,
            without_answers,
        })
        .await
        .unwrap()
}

/// Polls and claims task `id` (due at `now`).
pub async fn claim_due(store: &dyn TaskStore, id: &str, now: Millis) -> ClaimedTask {
    let report = poll(store, now).await;
    let queued = report
        .enqueued
        .iter()
        .find(|t| t.id == id)
        .expect("enqueued");
    claim(store, id, queued.enqueue_token, now).await.unwrap()
}

/// A retriable failure due again at once.
pub fn retry_now() -> ResultOutcome {
    ResultOutcome::Retriable {
        error: "again".into(),
        retry_after: Some(Duration::from_millis(1)),
    }
}

/// A result carrying a journal write and a count of entries replayed.
pub async fn finish_with(
    store: &dyn TaskStore,
    id: &str,
    lease: i64,
    outcome: ResultOutcome,
    journal: Option<JournalWrite>,
    replayed: u32,
    now: Millis,
) -> Result<Result<TaskStatus, Refusal>, StoreError> {
    let mut answers = store
        .task_set_result_many(TaskSetResultMany {
            results: vec![TaskResult {
                id: id.into(),
                lease_token: lease,
                outcome,
                log: None,
                journal,
                replayed,
            }],
            now,
        })
        .await?;
    Ok(answers.remove(0))
}

/// Entries are written and read back in order, in pages, with or without
/// their answers; a write replaces the journal's tail from its `from`, and
/// one without entries cuts it. None of this moves the task.
pub async fn journals_are_written_replaced_and_cut(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let id = insert(store, new_task("mail"), T0).await;
    let lease = start(store, &id, T0).await;
    let before = store.task_get(&id).await.unwrap().unwrap();
    let first = JournalWrite {
        from: 0,
        entries: entries(0, 5, "first"),
    };
    assert_eq!(write(store, &id, lease, 1, first).await.unwrap(), Ok(()));
    assert_eq!(journal(store, &id).await, entries(0, 5, "first"));
    let after = store.task_get(&id).await.unwrap().unwrap();
    assert_eq!(
        (after.status, after.next_trigger_at, after.lease_token),
        (before.status, before.next_trigger_at, before.lease_token),
        "a journal write moves nothing"
    );

    // A page, and a page without answers.
    assert_eq!(page(store, &id, 1, 2, false).await, entries(1, 2, "first"));
    let bare: Vec<_> = entries(3, 2, "first")
        .into_iter()
        .map(|e| JournalEntry {
            answer: Vec::new(),
            ..e
        })
        .collect();
    assert_eq!(page(store, &id, 3, 10, true).await, bare);
    assert!(page(store, &id, 5, 10, false).await.is_empty());
    assert!(page(store, &id, 0, 0, false).await.is_empty());

    // Replacing the tail from entry 3, with more entries than it had.
    let tail = JournalWrite {
        from: 3,
        entries: entries(3, 4, "second"),
    };
    assert_eq!(write(store, &id, lease, 1, tail).await.unwrap(), Ok(()));
    let mut expected = entries(0, 3, "first");
    expected.extend(entries(3, 4, "second"));
    assert_eq!(journal(store, &id).await, expected);

    // Appending at the end, then cutting to two, then to nothing.
    let append = JournalWrite {
        from: 7,
        entries: entries(7, 1, "third"),
    };
    assert_eq!(write(store, &id, lease, 1, append).await.unwrap(), Ok(()));
    assert_eq!(journal(store, &id).await.len(), 8);
    let cut = JournalWrite {
        from: 2,
        entries: Vec::new(),
    };
    assert_eq!(write(store, &id, lease, 1, cut).await.unwrap(), Ok(()));
    assert_eq!(journal(store, &id).await, entries(0, 2, "first"));
    let cut = JournalWrite::default();
    assert_eq!(write(store, &id, lease, 1, cut).await.unwrap(), Ok(()));
    assert!(journal(store, &id).await.is_empty());
    // An unknown task has no journal.
    assert!(journal(store, "nope").await.is_empty());
}

/// A write is fenced exactly like a heartbeat: refused for an unknown task,
/// under a lease that is not the task's, or once the task no longer runs;
/// allowed while it is only claimed. Refused writes change nothing.
pub async fn journal_writes_are_fenced_by_the_lease(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let id = insert(store, new_task("mail"), T0).await;
    let token = poll(store, T0).await.enqueued[0].enqueue_token;
    let first = claim(store, &id, token, T0).await.unwrap();
    let one = |tag: &str| JournalWrite {
        from: 0,
        entries: entries(0, 1, tag),
    };
    // Claimed, not yet heartbeating: the lease holds.
    let written = write(store, &id, first.lease_token, 1, one("claimed")).await;
    assert_eq!(written.unwrap(), Ok(()));
    let task = store.task_get(&id).await.unwrap().unwrap();
    assert_eq!(task.status, TaskStatus::Claimed);
    assert_eq!(
        write(store, "nope", 1, 1, one("x")).await.unwrap(),
        Err(Refusal::NotFound)
    );

    // The claim lapsed: the task is queued again, under the same lease.
    let again = poll(store, T0 + 30_000).await.enqueued;
    let lapsed = write(store, &id, first.lease_token, 1, one("lapsed")).await;
    assert_eq!(
        lapsed.unwrap(),
        Err(Refusal::WrongState(TaskStatus::Enqueued))
    );
    // Claimed again: the first lease is stale.
    let second = claim(store, &id, again[0].enqueue_token, T0 + 30_001)
        .await
        .unwrap();
    assert_eq!(second.journal_len, 1);
    let stale = write(store, &id, first.lease_token, 1, one("stale")).await;
    assert_eq!(
        stale.unwrap(),
        Err(Refusal::StaleLease {
            current: second.lease_token
        })
    );
    assert_eq!(journal(store, &id).await, entries(0, 1, "claimed"));

    // Ended: refused under its last lease too.
    let done = finish(store, &id, second.lease_token, success(), T0 + 30_002).await;
    assert_eq!(done, Ok(TaskStatus::Success));
    let ended = write(store, &id, second.lease_token, 1, one("ended")).await;
    assert_eq!(
        ended.unwrap(),
        Err(Refusal::WrongState(TaskStatus::Success))
    );
    assert_eq!(journal(store, &id).await, entries(0, 1, "claimed"));
}

/// A write whose entries do not run on from its `from`, or that starts
/// past the journal's end (a hole), is refused whole as invalid, under the
/// lease that holds the task.
pub async fn malformed_journal_writes_are_refused_whole(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let id = insert(store, new_task("mail"), T0).await;
    let lease = start(store, &id, T0).await;
    let base = JournalWrite {
        from: 0,
        entries: entries(0, 2, "base"),
    };
    assert_eq!(write(store, &id, lease, 1, base).await.unwrap(), Ok(()));
    let mut gap = entries(2, 3, "gap");
    gap.remove(1);
    let malformed = [
        // Entries 2 and 4: a gap between them.
        JournalWrite {
            from: 2,
            entries: gap,
        },
        // Numbered from 3 but written from 2.
        JournalWrite {
            from: 2,
            entries: entries(3, 1, "off"),
        },
        // From 3, past the end (2): entry 2 would be missing.
        JournalWrite {
            from: 3,
            entries: entries(3, 1, "hole"),
        },
        // A cut past the end is a hole too.
        JournalWrite {
            from: 3,
            entries: Vec::new(),
        },
    ];
    for bad in malformed {
        let refused = write(store, &id, lease, 1, bad.clone()).await;
        assert!(matches!(refused, Err(StoreError::Invalid(_))), "{bad:?}");
    }
    assert_eq!(journal(store, &id).await, entries(0, 2, "base"));
    // Its length too, as the next claim hands it out.
    let retried = finish(store, &id, lease, retry_now(), T0 + 1).await;
    assert_eq!(retried, Ok(TaskStatus::RetriableFailure));
    assert_eq!(claim_due(store, &id, T0 + 10).await.journal_len, 2);
}

/// A result applies the journal write it carries with the result, and its
/// attempt records the entries it replayed; a refused result writes
/// nothing of its journal, and a malformed one fails its batch whole.
pub async fn results_carry_journal_writes(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let id = insert(store, new_task("mail"), T0).await;
    let lease = start(store, &id, T0).await;
    let outside = JournalWrite {
        from: 0,
        entries: entries(0, 2, "outside"),
    };
    assert_eq!(write(store, &id, lease, 1, outside).await.unwrap(), Ok(()));
    let last = JournalWrite {
        from: 2,
        entries: entries(2, 3, "with the result"),
    };
    let retried = finish_with(store, &id, lease, retry_now(), Some(last), 0, T0 + 1).await;
    assert_eq!(retried.unwrap(), Ok(TaskStatus::RetriableFailure));
    let mut expected = entries(0, 2, "outside");
    expected.extend(entries(2, 3, "with the result"));
    assert_eq!(journal(store, &id).await, expected);

    // The next attempt replays all five and is handed them.
    let second = claim_due(store, &id, T0 + 10).await;
    assert_eq!((second.attempt, second.journal_len), (2, 5));
    heartbeat(store, &id, second.lease_token, None, T0 + 11)
        .await
        .unwrap();
    // A stale result's journal is not written.
    let stale = JournalWrite {
        from: 5,
        entries: entries(5, 1, "stale"),
    };
    let refused = finish_with(store, &id, lease, success(), Some(stale), 0, T0 + 12).await;
    assert_eq!(
        refused.unwrap(),
        Err(Refusal::StaleLease {
            current: second.lease_token
        })
    );
    // A hole fails the result, which writes nothing.
    let hole = JournalWrite {
        from: 6,
        entries: entries(6, 1, "hole"),
    };
    let failed = finish_with(
        store,
        &id,
        second.lease_token,
        success(),
        Some(hole),
        5,
        T0 + 13,
    );
    assert!(matches!(failed.await, Err(StoreError::Invalid(_))));
    let task = store.task_get(&id).await.unwrap().unwrap();
    assert_eq!(task.status, TaskStatus::Processing);
    assert_eq!(journal(store, &id).await, expected);
    // A success that replayed the five and cut the rest away.
    let cut = JournalWrite {
        from: 3,
        entries: Vec::new(),
    };
    let done = finish_with(
        store,
        &id,
        second.lease_token,
        success(),
        Some(cut),
        5,
        T0 + 14,
    );
    assert_eq!(done.await.unwrap(), Ok(TaskStatus::Success));
    assert_eq!(journal(store, &id).await, expected[..3]);
    let replayed: Vec<u32> = store
        .attempt_list(&id)
        .await
        .unwrap()
        .iter()
        .map(|a| a.replayed)
        .collect();
    assert_eq!(replayed, [0, 5]);
}

/// Calls and summaries hold any Rust string, digests and answers any
/// bytes, alone and with a result.
pub async fn journals_hold_any_string_and_bytes(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let id = insert(store, new_task("mail"), T0).await;
    let lease = start(store, &id, T0).await;
    let every_byte: Vec<u8> = (0..=255).collect();
    let awkward = |seq: u32| JournalEntry {
        call: format!("{AWKWARD} {seq}"),
        summary: AWKWARD.into(),
        digest: every_byte.clone(),
        answer: every_byte.iter().rev().copied().collect(),
        ..entry(seq, "")
    };
    let alone = JournalWrite {
        from: 0,
        entries: vec![
            awkward(0),
            JournalEntry {
                call: String::new(),
                summary: String::new(),
                digest: Vec::new(),
                answer: Vec::new(),
                ..entry(1, "")
            },
        ],
    };
    assert_eq!(
        write(store, &id, lease, 1, alone.clone()).await.unwrap(),
        Ok(())
    );
    let with_result = JournalWrite {
        from: 2,
        entries: vec![awkward(2)],
    };
    let done = finish_with(store, &id, lease, success(), Some(with_result), 0, T0 + 1);
    assert_eq!(done.await.unwrap(), Ok(TaskStatus::Success));
    let mut expected = alone.entries;
    expected.push(awkward(2));
    assert_eq!(journal(store, &id).await, expected);
}
