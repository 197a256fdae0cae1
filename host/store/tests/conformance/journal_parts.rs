//! Journal writes as an execution sends them: numbered in turn under its
//! lease, a late copy of an earlier one refused, and a write larger than
//! one message sent as parts that land whole or not at all.

use waft_core::TaskStatus;
use waft_store::{JournalPart, JournalWrite, Refusal, StoreError, TaskJournalWrite, TaskStore};

use crate::journal::{claim_due, entries, journal};
use crate::support::*;

/// Sends `write` to task `id`'s journal under `lease` as a message that
/// follows `after` of the lease's, part of a write from `start`, with
/// `more` parts after it.
async fn send(
    store: &dyn TaskStore,
    id: &str,
    lease: i64,
    write: JournalWrite,
    (after, start, more): (u32, u32, bool),
) -> Result<Result<(), Refusal>, StoreError> {
    let part = JournalPart { after, start, more };
    store
        .task_journal_write(TaskJournalWrite {
            id: id.into(),
            lease_token: lease,
            version: 1,
            write,
            part: Some(part),
            generation: None,
        })
        .await
}

/// `count` entries from `from`, tagged.
fn write(from: u32, count: u32, tag: &str) -> JournalWrite {
    JournalWrite {
        from,
        entries: entries(from, count, tag),
    }
}

/// An execution's writes follow each other: a copy of an earlier one that
/// arrives late (a retried call whose first copy was held up) changes
/// nothing, even when the journal's length says nothing moved since; the
/// copy of the one taken last is answered as written; a message past its
/// turn is refused too. A new lease counts afresh.
pub async fn a_late_copy_of_an_earlier_write_is_refused(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let id = insert(store, new_task("mail"), T0).await;
    let lease = start(store, &id, T0).await;
    let first = write(0, 2, "first");
    // Entries 2..6, of which 4 is still waiting for its answer.
    let second = write(2, 4, "second");
    // Entry 4 answered: the tail from it again, the length unchanged.
    let third = write(4, 2, "answered");
    let sent = [first.clone(), second.clone(), third.clone()];
    for (after, w) in (0..).zip(sent) {
        let start = w.from;
        let written = send(store, &id, lease, w, (after, start, false)).await;
        assert_eq!(written.unwrap(), Ok(()));
    }
    let mut expected = entries(0, 2, "first");
    expected.extend(entries(2, 2, "second"));
    expected.extend(entries(4, 2, "answered"));
    assert_eq!(journal(store, &id).await, expected);

    // The second write's first copy, late; then the first's.
    let late = send(store, &id, lease, second, (1, 2, false)).await;
    assert!(
        matches!(&late, Err(e @ StoreError::JournalOutOfTurn { after: 1, taken: 3, .. })
            if e.to_string().contains("late copy")),
        "a late copy was taken: {late:?}"
    );
    assert_eq!(
        journal(store, &id).await,
        expected,
        "the answer at 4 is lost"
    );
    let late = send(store, &id, lease, first, (0, 0, false)).await;
    assert!(
        matches!(late, Err(StoreError::JournalOutOfTurn { .. })),
        "{late:?}"
    );
    // The third again (its answer was lost): written, nothing changes.
    let again = send(store, &id, lease, third, (2, 4, false)).await;
    assert_eq!(again.unwrap(), Ok(()));
    assert_eq!(journal(store, &id).await, expected);
    // Past its turn.
    let ahead = send(store, &id, lease, write(6, 1, "ahead"), (4, 6, false)).await;
    assert!(
        matches!(ahead, Err(StoreError::JournalOutOfTurn { .. })),
        "{ahead:?}"
    );
    // In turn, under the lease only.
    let stale = send(store, &id, lease - 1, write(6, 1, "x"), (3, 6, false)).await;
    assert_eq!(stale.unwrap(), Err(Refusal::StaleLease { current: lease }));
    let next = send(store, &id, lease, write(6, 1, "next"), (3, 6, false)).await;
    assert_eq!(next.unwrap(), Ok(()));
    expected.extend(entries(6, 1, "next"));
    assert_eq!(journal(store, &id).await, expected);

    // The next attempt's lease counts its own writes from none.
    let retried = finish(store, &id, lease, retriable("again"), T0 + 1).await;
    assert_eq!(retried, Ok(TaskStatus::RetriableFailure));
    let next_lease = start(store, &id, T0 + 60_000).await;
    let first_again = send(store, &id, next_lease, write(7, 1, "b"), (0, 7, false)).await;
    assert_eq!(first_again.unwrap(), Ok(()));
    assert_eq!(journal(store, &id).await.len(), 8);
}

/// A write sent in parts changes the journal with its last part only: one
/// whose execution died between parts leaves the journal as it was (the
/// answers of the tail it rewrote included), and the parts it staged are
/// never landed by a later write.
pub async fn a_write_cut_short_between_its_parts_loses_nothing(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let id = insert(store, new_task("mail"), T0).await;
    let lease = start(store, &id, T0).await;
    let recorded = write(0, 6, "recorded");
    let whole = send(store, &id, lease, recorded, (0, 0, false)).await;
    assert_eq!(whole.unwrap(), Ok(()));
    // The tail from 2 again, in two parts; only the first arrives.
    let part = write(2, 2, "filled");
    let staged = send(store, &id, lease, part, (1, 2, true)).await;
    assert_eq!(staged.unwrap(), Ok(()));
    assert_eq!(
        journal(store, &id).await,
        entries(0, 6, "recorded"),
        "answers were deleted by a part"
    );

    // The attempt ends without a journal; the next claims it whole.
    let retried = finish(store, &id, lease, retriable("lost"), T0 + 1).await;
    assert_eq!(retried, Ok(TaskStatus::RetriableFailure));
    let claimed = claim_due(store, &id, T0 + 60_000).await;
    assert_eq!(claimed.journal_len, 6);
    let next = claimed.lease_token;
    // Its own write, in three parts from 4, lands whole with its last;
    // nothing the lost execution staged comes with it.
    let parts = [
        (write(4, 1, "second"), (0, 4, true)),
        (write(5, 2, "second"), (1, 4, true)),
    ];
    for (w, part) in parts {
        assert_eq!(send(store, &id, next, w, part).await.unwrap(), Ok(()));
        assert_eq!(journal(store, &id).await, entries(0, 6, "recorded"));
    }
    let last = send(store, &id, next, write(7, 1, "second"), (2, 4, false)).await;
    assert_eq!(last.unwrap(), Ok(()));
    let mut expected = entries(0, 4, "recorded");
    expected.extend(entries(4, 4, "second"));
    assert_eq!(journal(store, &id).await, expected);

    // A last part whose parts before were not staged (numbered wrong) is
    // refused whole.
    let orphan = send(store, &id, next, write(9, 1, "orphan"), (3, 8, false)).await;
    assert!(matches!(orphan, Err(StoreError::Invalid(_))), "{orphan:?}");
    assert_eq!(journal(store, &id).await, expected);
}
