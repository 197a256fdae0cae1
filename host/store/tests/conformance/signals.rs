//! Signals: kept with their task until it ends, taken in the order they
//! came, one a wait; a task suspended waiting for a signal wakes when it is
//! sent (and not for another name), or when one was sent while its
//! execution still ran; an ended task is refused one; only the execution
//! holding the lease reads them.

use waft_core::TaskStatus;
use waft_core::limits::{ITEM_OVERHEAD, MAX_SIGNAL_BYTES, MAX_SIGNAL_PAYLOAD, MAX_SIGNALS};
use waft_store::{
    Refusal, ResultOutcome, SignalSent, StoreError, TaskSignal, TaskSignalRead, TaskStore, Wait,
};

use crate::support::{T0, deploy, deploy_with, finish, insert, new_task, poll, start, success};

const TIMEOUT: i64 = T0 + 3 * 24 * 3_600_000;

fn signal(id: &str, name: &str, payload: &[u8], now: i64) -> TaskSignal {
    TaskSignal {
        id: id.to_owned(),
        name: name.to_owned(),
        payload: payload.to_vec(),
        now,
    }
}

fn waiting_for(name: &str, taken: u32) -> ResultOutcome {
    ResultOutcome::Suspend {
        until: TIMEOUT,
        wait: Wait::Signal {
            name: name.to_owned(),
            taken,
        },
    }
}

async fn read(
    store: &dyn TaskStore,
    id: &str,
    lease: i64,
    name: &str,
    taken: u32,
) -> Result<Option<Vec<u8>>, Refusal> {
    let read = TaskSignalRead {
        id: id.to_owned(),
        lease_token: lease,
        name: name.to_owned(),
        taken,
    };
    store.task_signal_read(read).await.unwrap()
}

pub async fn signals_are_kept_and_taken_in_order(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let id = insert(store, new_task("mail"), T0).await;
    // Sent before the task ever ran.
    for (n, (name, payload)) in [("go", "1"), ("stop", "x"), ("go", "2\0é")]
        .into_iter()
        .enumerate()
    {
        let sent = store
            .task_signal(signal(&id, name, payload.as_bytes(), T0 + 1))
            .await
            .unwrap();
        assert_eq!(
            sent,
            SignalSent {
                seq: n as u32,
                woke: false
            }
        );
    }
    let lease = start(store, &id, T0 + 2).await;
    assert_eq!(
        read(store, &id, lease, "go", 0).await,
        Ok(Some(b"1".to_vec()))
    );
    assert_eq!(
        read(store, &id, lease, "go", 1).await,
        Ok(Some("2\0é".as_bytes().to_vec()))
    );
    assert_eq!(read(store, &id, lease, "go", 2).await, Ok(None));
    assert_eq!(
        read(store, &id, lease, "stop", 0).await,
        Ok(Some(b"x".to_vec()))
    );
    assert_eq!(read(store, &id, lease, "other", 0).await, Ok(None));
    // Only under the current lease of a running task.
    assert_eq!(
        read(store, &id, lease - 1, "go", 0).await,
        Err(Refusal::StaleLease { current: lease })
    );
    assert_eq!(
        read(store, "no-such-task", lease, "go", 0).await,
        Err(Refusal::NotFound)
    );
}

pub async fn a_signal_wakes_the_task_suspended_waiting_for_it(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let id = insert(store, new_task("mail"), T0).await;
    let lease = start(store, &id, T0 + 1).await;
    assert_eq!(
        finish(store, &id, lease, waiting_for("approved", 0), T0 + 2).await,
        Ok(TaskStatus::Suspended)
    );
    assert_eq!(
        store.task_get(&id).await.unwrap().unwrap().next_trigger_at,
        Some(TIMEOUT)
    );
    // Another name does not wake it.
    let sent = store
        .task_signal(signal(&id, "rejected", b"", T0 + 3))
        .await
        .unwrap();
    assert!(!sent.woke);
    assert!(poll(store, T0 + 4).await.enqueued.is_empty());
    // Its own does, at once.
    let sent = store
        .task_signal(signal(&id, "approved", b"yes", T0 + 5))
        .await
        .unwrap();
    assert_eq!(sent, SignalSent { seq: 1, woke: true });
    let task = store.task_get(&id).await.unwrap().unwrap();
    assert_eq!(task.status, TaskStatus::Suspended);
    assert_eq!(task.next_trigger_at, Some(T0 + 5));
    assert_eq!(poll(store, T0 + 5).await.enqueued.len(), 1);
}

/// A signal sent while the execution ran, after it last looked: the
/// suspension finds it and the task is due at once.
pub async fn a_signal_sent_before_the_suspension_wakes_it_at_once(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let id = insert(store, new_task("mail"), T0).await;
    let lease = start(store, &id, T0 + 1).await;
    store
        .task_signal(signal(&id, "approved", b"early", T0 + 2))
        .await
        .unwrap();
    assert_eq!(
        finish(store, &id, lease, waiting_for("approved", 0), T0 + 3).await,
        Ok(TaskStatus::Suspended)
    );
    let task = store.task_get(&id).await.unwrap().unwrap();
    assert_eq!(task.next_trigger_at, Some(T0 + 3));

    // One it took already does not.
    let lease = start(store, &id, T0 + 4).await;
    assert_eq!(
        finish(store, &id, lease, waiting_for("approved", 1), T0 + 5).await,
        Ok(TaskStatus::Suspended)
    );
    let task = store.task_get(&id).await.unwrap().unwrap();
    assert_eq!(task.next_trigger_at, Some(TIMEOUT));
}

pub async fn signals_to_ended_tasks_and_bad_signals_are_refused(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let id = insert(store, new_task("mail"), T0).await;
    let lease = start(store, &id, T0 + 1).await;
    assert_eq!(
        finish(store, &id, lease, success(), T0 + 2).await,
        Ok(TaskStatus::Success)
    );
    let ended = store
        .task_signal(signal(&id, "approved", b"", T0 + 3))
        .await;
    assert!(
        matches!(
            ended,
            Err(StoreError::AlreadyEnded {
                status: TaskStatus::Success,
                ..
            })
        ),
        "{ended:?}"
    );
    let unknown = store
        .task_signal(signal("nope", "approved", b"", T0 + 3))
        .await;
    assert!(
        matches!(unknown, Err(StoreError::TaskNotFound(_))),
        "{unknown:?}"
    );

    let id = insert(store, new_task("mail"), T0).await;
    for name in ["", "a\nb", &"n".repeat(129)] {
        let bad = store.task_signal(signal(&id, name, b"", T0 + 3)).await;
        assert!(
            matches!(bad, Err(StoreError::Invalid(_))),
            "{name:?}: {bad:?}"
        );
    }
    // The lambda's max_payload bounds a signal's payload too.
    let large = vec![b'x'; 300 * 1024];
    let too_large = store.task_signal(signal(&id, "big", &large, T0 + 3)).await;
    assert!(
        matches!(too_large, Err(StoreError::PayloadTooLarge { .. })),
        "{too_large:?}"
    );
    // Whatever the lambda's `max_payload`, a payload must fit in the
    // journal entry of the wait that takes it.
    let mut roomy = crate::support::config();
    roomy.max_payload = waft_core::LambdaConfig::MAX_PAYLOAD;
    deploy_with(store, "roomy", roomy).await;
    let roomy = insert(store, new_task("roomy"), T0).await;
    let over = vec![b'x'; MAX_SIGNAL_PAYLOAD + 1];
    let refused = store
        .task_signal(signal(&roomy, "big", &over, T0 + 3))
        .await;
    assert!(
        matches!(refused, Err(StoreError::PayloadTooLarge { .. })),
        "{refused:?}"
    );
    let at_the_bound = &over[..MAX_SIGNAL_PAYLOAD];
    store
        .task_signal(signal(&roomy, "big", at_the_bound, T0 + 3))
        .await
        .unwrap();
    // And a task keeps at most MAX_SIGNALS.
    for n in 0..MAX_SIGNALS {
        store
            .task_signal(signal(&id, "many", &n.to_be_bytes(), T0 + 4))
            .await
            .unwrap();
    }
    let one_more = store.task_signal(signal(&id, "many", b"", T0 + 5)).await;
    assert!(
        matches!(one_more, Err(StoreError::TooManySignals { .. })),
        "{one_more:?}"
    );
    // Nothing refused was kept.
    let lease = start(store, &id, T0 + 6).await;
    assert_eq!(read(store, &id, lease, "big", 0).await, Ok(None));
    assert_eq!(read(store, &id, lease, "", 0).await, Ok(None));
}

/// The overview counts the suspended tasks that wait for a signal apart
/// from those asleep; one woken by its signal is neither.
pub async fn the_overview_counts_tasks_waiting_for_signals(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let asleep = insert(store, new_task("mail"), T0).await;
    let lease = start(store, &asleep, T0 + 1).await;
    let sleep = ResultOutcome::Suspend {
        until: TIMEOUT,
        wait: Wait::Timer,
    };
    finish(store, &asleep, lease, sleep, T0 + 2).await.unwrap();
    let mut waiting = Vec::new();
    for n in 0..2 {
        let id = insert(store, new_task("mail"), T0).await;
        let lease = start(store, &id, T0 + 3 + n).await;
        finish(store, &id, lease, waiting_for("approved", 0), T0 + 5)
            .await
            .unwrap();
        waiting.push(id);
    }
    let mail = |stats: Vec<waft_store::LambdaStats>| {
        let mail = stats.into_iter().find(|s| s.lambda == "mail").unwrap();
        (mail.suspended, mail.waiting_for_signal)
    };
    assert_eq!(mail(store.lambda_stats(T0 + 6, T0).await.unwrap()), (3, 2));
    store
        .task_signal(signal(&waiting[0], "approved", b"", T0 + 7))
        .await
        .unwrap();
    poll(store, T0 + 8).await;
    assert_eq!(mail(store.lambda_stats(T0 + 9, T0).await.unwrap()), (2, 1));
}

/// A task's kept signals are bounded by bytes as well as by count: one
/// that would take them past the task's signal budget is refused, and
/// nothing of it is kept.
pub async fn a_tasks_signals_are_bounded_by_bytes(store: &dyn TaskStore) {
    let mut roomy = crate::support::config();
    roomy.max_payload = waft_core::LambdaConfig::MAX_PAYLOAD;
    deploy_with(store, "roomy", roomy).await;
    let id = insert(store, new_task("roomy"), T0).await;
    let big = vec![b'x'; MAX_SIGNAL_PAYLOAD];
    let fit = MAX_SIGNAL_BYTES / (MAX_SIGNAL_PAYLOAD + 3 + ITEM_OVERHEAD);
    assert!(
        fit < MAX_SIGNALS as usize,
        "the budget, not the count, is what refuses"
    );
    for n in 0..fit {
        store
            .task_signal(signal(&id, "big", &big, T0 + n as i64))
            .await
            .unwrap();
    }
    let refused = store.task_signal(signal(&id, "big", &big, T0 + 10)).await;
    match refused {
        Err(StoreError::SignalBudget {
            kept, size, max, ..
        }) => {
            assert_eq!(max, MAX_SIGNAL_BYTES as u64);
            assert_eq!(kept, fit as u64 * size);
            let message = StoreError::SignalBudget {
                id: id.clone(),
                kept,
                size,
                max,
                overhead: ITEM_OVERHEAD as u64,
            }
            .to_string();
            assert!(message.contains("signal budget"), "{message}");
            let status = waft_core::ServiceError::from(StoreError::SignalBudget {
                id: id.clone(),
                kept,
                size,
                max,
                overhead: 0,
            });
            assert!(
                matches!(status, waft_core::ServiceError::ResourceExhausted(_)),
                "{status:?}"
            );
        }
        other => panic!("expected the signal budget to refuse it, got {other:?}"),
    }
    // Small signals still fit beside them; another task has its own budget.
    store
        .task_signal(signal(&id, "small", b"ok", T0 + 11))
        .await
        .unwrap();
    let other = insert(store, new_task("roomy"), T0).await;
    store
        .task_signal(signal(&other, "big", &big, T0 + 12))
        .await
        .unwrap();
    let lease = start(store, &id, T0 + 13).await;
    assert_eq!(
        read(store, &id, lease, "big", fit as u32).await,
        Ok(None),
        "nothing refused was kept"
    );
}
