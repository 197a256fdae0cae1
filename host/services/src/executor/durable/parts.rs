//! Journal writes in parts through the real HSC into the real stores
//! (SQLite and Postgres): an execution that dies between the parts of a
//! write leaves every answer its task's journal held.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use waft_runtime::KillSwitch;
use waft_store::{
    ChildrenState, Heartbeat, LambdaDeploy, NewTask, PostgresStore, SqliteStore, TaskChildrenRead,
    TaskClaimMany, TaskEnqueueReady, TaskInsertMany, TaskJournalRead, TaskResult, TaskSignalRead,
    TaskStore,
};

use super::*;
use crate::{Clock, HeartbeatConfig, Hsc, SystemClock, journal_entry};

/// The real HSC, as far as journal writes reach it: after `reach` of them
/// the execution is stopped, as if its executor died.
struct Cut {
    hsc: Hsc,
    reach: Mutex<u32>,
    kill: KillSwitch,
}

#[async_trait::async_trait]
impl HscApi for Cut {
    async fn task_claim_many(
        &self,
        _: Vec<(String, i64)>,
    ) -> ServiceResult<Vec<Result<ClaimedTask, Refusal>>> {
        unreachable!("journals only")
    }

    async fn task_heartbeat_many(
        &self,
        _: Vec<Heartbeat>,
    ) -> ServiceResult<Vec<Result<(), Refusal>>> {
        unreachable!("journals only")
    }

    async fn task_set_result_many(
        &self,
        _: Vec<TaskResult>,
    ) -> ServiceResult<Vec<Result<waft_core::TaskStatus, Refusal>>> {
        unreachable!("journals only")
    }

    async fn task_journal_write(
        &self,
        commit: JournalCommit,
    ) -> ServiceResult<Result<(), Refusal>> {
        {
            let mut reach = self.reach.lock().unwrap();
            if *reach == 0 {
                self.kill.kill("the executor died");
                return Err(ServiceError::Unavailable("gone".into()));
            }
            *reach -= 1;
        }
        self.hsc.task_journal_write(commit).await
    }

    async fn task_journal_read(
        &self,
        page: JournalPage,
    ) -> ServiceResult<Result<Vec<JournalEntry>, Refusal>> {
        self.hsc.task_journal_read(page).await
    }

    async fn task_signal_read(
        &self,
        _: TaskSignalRead,
    ) -> ServiceResult<Result<Option<Vec<u8>>, Refusal>> {
        unreachable!("journals only")
    }

    async fn task_children_read(
        &self,
        _: TaskChildrenRead,
    ) -> ServiceResult<Result<ChildrenState, Refusal>> {
        unreachable!("journals only")
    }
}

/// A claimed task of a new lambda in `store`.
async fn claimed(store: &dyn TaskStore) -> ClaimedTask {
    let now = SystemClock.now();
    let deploy = LambdaDeploy {
        name: "pay".into(),
        digest: "digest-of-pay".into(),
        component: b"pay".to_vec(),
        artifact: None,
        config: waft_core::LambdaConfig::default(),
        now,
    };
    store.lambda_deploy(deploy).await.unwrap();
    let task = NewTask {
        lambda: "pay".into(),
        ..NewTask::default()
    };
    let tasks = vec![task];
    let id = store
        .task_insert_many(TaskInsertMany { tasks, now })
        .await
        .unwrap()
        .remove(0)
        .id;
    let ready = TaskEnqueueReady {
        now,
        limit: 10,
        enqueue_timeout: Duration::from_secs(60),
    };
    let token = store.task_enqueue_ready(ready).await.unwrap().enqueued[0].enqueue_token;
    let claims = TaskClaimMany {
        claims: vec![(id, token)],
        now,
        claim_timeout: Duration::from_secs(60),
    };
    store
        .task_claim_many(claims)
        .await
        .unwrap()
        .remove(0)
        .unwrap()
}

/// Entry `seq` with an answer of `bytes` bytes that tells `tag` apart.
fn entry(seq: u32, bytes: usize, tag: u8) -> JournalEntry {
    let mut entry = journal_entry(seq, bytes);
    entry.answer[0] = tag;
    entry
}

/// A journal of six answered entries; the execution rewrites its tail
/// from entry 2 (a hole answered: the recorded tail sent again) in two
/// parts, and dies after the first. The journal is as it was; the write
/// sent whole afterwards lands.
async fn a_write_cut_short_between_its_parts_loses_no_answer(store: Arc<dyn TaskStore>) {
    let task = claimed(store.as_ref()).await;
    let kill = KillSwitch::new();
    let cut = Cut {
        hsc: Hsc::new(
            store.clone(),
            Arc::new(SystemClock),
            HeartbeatConfig::default(),
        ),
        reach: Mutex::new(2),
        kill: kill.clone(),
    };
    // Patient: a debug build takes seconds to write a part of 15 MiB.
    let link = JournalLink {
        hsc: &cut,
        kill: &kill,
        patience: Duration::from_secs(120),
    };
    let write = |w| link.write(&task.id, task.lease_token, task.lambda_version, 0, w);
    let recorded: Vec<_> = (0..6).map(|seq| entry(seq, 1, b'r')).collect();
    let whole = JournalWrite {
        from: 0,
        entries: recorded.clone(),
    };
    assert_eq!(write(whole).await, Ok(1));

    let tail = JournalWrite {
        from: 2,
        entries: (2..6).map(|seq| entry(seq, 5 << 20, b'n')).collect(),
    };
    let cut_short = link.write(
        &task.id,
        task.lease_token,
        task.lambda_version,
        1,
        tail.clone(),
    );
    let failure = cut_short.await;
    assert_eq!(
        failure,
        Err(JournalFailure::LeaseLost("the executor died".into()))
    );
    let read = TaskJournalRead {
        id: task.id.clone(),
        from: 0,
        limit: 100,
        without_answers: false,
    };
    let kept = store.task_journal(read.clone()).await.unwrap();
    assert!(
        kept == recorded,
        "the journal lost answers: {} entries",
        kept.len()
    );

    // Sent again under the same lease, the write lands whole.
    *cut.reach.lock().unwrap() = u32::MAX;
    let alive = KillSwitch::new();
    let link = JournalLink {
        kill: &alive,
        ..link
    };
    let sent = link.write(
        &task.id,
        task.lease_token,
        task.lambda_version,
        2,
        tail.clone(),
    );
    assert_eq!(sent.await, Ok(4));
    let mut expected = recorded[..2].to_vec();
    expected.extend(tail.entries);
    assert!(store.task_journal(read).await.unwrap() == expected);
}

#[tokio::test]
async fn sqlite_a_write_cut_short_between_its_parts_loses_no_answer() {
    let store = SqliteStore::connect("sqlite::memory:").await.unwrap();
    a_write_cut_short_between_its_parts_loses_no_answer(Arc::new(store)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_write_cut_short_between_its_parts_loses_no_answer() {
    let Some(server) = waft_testing::postgres() else {
        return;
    };
    let url = server.fresh_database().await;
    let store = PostgresStore::connect(&url, 4).await.unwrap();
    a_write_cut_short_between_its_parts_loses_no_answer(Arc::new(store)).await;
}
