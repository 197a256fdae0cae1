//! Children written in batches, through a running execution's host into
//! a real store: each waits for its batch under the id it was answered
//! with, is written soon whatever the lambda does, and is written at once
//! when the store could refuse it.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use waft_runtime::{ChildRequest, ScheduleRejection, TaskHost};
use waft_store::{JournalWrite, SqliteStore, TaskStore};

use super::super::durable::tests::JournalHsc;
use super::super::host::tests::{host_on, result};
use super::*;
use crate::{Clock, SystemClock};

/// A store with lambdas `mail` and `paced` (which has a schedule
/// quota), and the host of a running execution of a `mail` task.
async fn running() -> (Arc<dyn TaskStore>, ExecutionHost) {
    let store: Arc<dyn TaskStore> =
        Arc::new(SqliteStore::connect("sqlite::memory:").await.unwrap());
    let now = SystemClock.now();
    for (name, quota_per_sec) in [("paced", Some(1_000.0)), ("mail", None)] {
        let config = waft_core::LambdaConfig {
            quota_per_sec,
            allowed_children: vec!["paced".into()],
            ..waft_core::LambdaConfig::default()
        };
        let deploy = waft_store::LambdaDeploy {
            name: name.into(),
            digest: format!("digest-of-{name}"),
            component: name.as_bytes().to_vec(),
            artifact: None,
            config,
            now,
        };
        store.lambda_deploy(deploy).await.unwrap();
    }
    let parent = waft_store::NewTask {
        lambda: "mail".into(),
        ..waft_store::NewTask::default()
    };
    let tasks = vec![parent];
    let id = store
        .task_insert_many(waft_store::TaskInsertMany { tasks, now })
        .await
        .unwrap()
        .remove(0)
        .id;
    let ready = waft_store::TaskEnqueueReady {
        now,
        limit: 10,
        enqueue_timeout: Duration::from_secs(60),
    };
    let token = store.task_enqueue_ready(ready).await.unwrap().enqueued[0].enqueue_token;
    let claims = waft_store::TaskClaimMany {
        claims: vec![(id.clone(), token)],
        now,
        claim_timeout: Duration::from_secs(60),
    };
    let claimed = store
        .task_claim_many(claims)
        .await
        .unwrap()
        .remove(0)
        .unwrap();
    let mut host = host_on(store.clone(), Arc::new(JournalHsc::default()), 100);
    host.task_id = id;
    host.lease_token = claimed.lease_token;
    (store, host)
}

fn child_of(lambda: &str, rank: u32) -> ChildRequest {
    ChildRequest {
        lambda: lambda.into(),
        payload: b"{}".to_vec(),
        collection: None,
        priority: None,
        not_before: None,
        key: None,
        rank,
    }
}

async fn children_of(store: &dyn TaskStore, parent: &str) -> Vec<String> {
    let list = waft_store::TaskList {
        parent_id: Some(parent.into()),
        ..waft_store::TaskList::default()
    };
    let mut ids: Vec<String> = store
        .task_list(list)
        .await
        .unwrap()
        .into_iter()
        .map(|task| task.id)
        .collect();
    ids.sort();
    ids
}

/// The first child of a lambda, collection and priority is written at
/// once; the next ones are answered at once and written before the
/// execution's next step outside, under the ids they were answered
/// with, which are the same in every attempt.
#[tokio::test]
async fn children_wait_for_their_batch_under_the_ids_they_were_told() {
    let (store, host) = running().await;
    let first = host.schedule(child_of("mail", 0)).await.unwrap();
    assert_eq!(first, child_id(&host.task_id, 0, 0));
    assert_eq!(
        children_of(store.as_ref(), &host.task_id).await,
        vec![first.clone()]
    );
    let mut told = Vec::new();
    for rank in [1, 2] {
        told.push(host.schedule(child_of("mail", rank)).await.unwrap());
    }
    assert_eq!(
        told,
        [child_id(&host.task_id, 0, 1), child_id(&host.task_id, 0, 2)]
    );
    assert_eq!(children_of(store.as_ref(), &host.task_id).await.len(), 1);
    host.settle().await.unwrap();
    let mut all = vec![first, told[0].clone(), told[1].clone()];
    all.sort();
    assert_eq!(children_of(store.as_ref(), &host.task_id).await, all);
    // A journal write and a result write them too (and a read of the
    // children, which this HSC does not answer).
    host.schedule(child_of("mail", 3)).await.unwrap();
    host.journal(JournalWrite::default()).await.unwrap();
    assert_eq!(children_of(store.as_ref(), &host.task_id).await.len(), 4);
    host.schedule(child_of("mail", 4)).await.unwrap();
    let mut done = result(0, JournalWrite::default());
    done.id = host.task_id.clone();
    assert!(host.carried(done).await.is_some());
    assert_eq!(children_of(store.as_ref(), &host.task_id).await.len(), 5);
}

/// A child waiting for its batch is written soon even when the lambda
/// takes no step outside for long (it computes): the execution's
/// writer beside it writes what has waited a moment.
#[tokio::test]
async fn a_waiting_child_is_written_soon_whatever_the_lambda_does() {
    let (store, host) = running().await;
    host.schedule(child_of("mail", 0)).await.unwrap();
    host.schedule(child_of("mail", 1)).await.unwrap();
    assert_eq!(children_of(store.as_ref(), &host.task_id).await.len(), 1);
    let written = async {
        while children_of(store.as_ref(), &host.task_id).await.len() < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::select! {
        () = written => {}
        never = host.write_children_when_due() => match never {},
        () = tokio::time::sleep(Duration::from_secs(10)) => panic!("the child still waits"),
    }
}

/// Children the store could refuse are written at once, each answered
/// as the store answers: of a lambda with a schedule quota, due later,
/// or of another collection than those taken.
#[tokio::test]
async fn a_child_the_store_could_refuse_is_written_at_once() {
    let (store, host) = running().await;
    let later = ChildRequest {
        not_before: Some(SystemTime::now() + Duration::from_secs(60)),
        ..child_of("mail", 2)
    };
    let other = ChildRequest {
        collection: Some("other".into()),
        ..child_of("mail", 3)
    };
    let requests = [child_of("paced", 0), child_of("paced", 1), later, other];
    for (written, child) in requests.into_iter().enumerate() {
        host.schedule(child).await.unwrap();
        let stored = children_of(store.as_ref(), &host.task_id).await.len();
        assert_eq!(stored, written + 1);
    }
}

/// A child's key reaches the store, in a batch as alone; a key the
/// store would refuse is refused at once, before any batch holds it.
#[tokio::test]
async fn a_childs_key_is_kept_and_a_bad_one_refused_at_once() {
    let (store, host) = running().await;
    let keyed = |rank, key: &str| ChildRequest {
        key: Some(key.into()),
        ..child_of("mail", rank)
    };
    host.schedule(keyed(0, "acme")).await.unwrap();
    host.schedule(keyed(1, "globex")).await.unwrap();
    let refused = host.schedule(keyed(2, "")).await.unwrap_err();
    assert!(
        matches!(&refused, ScheduleRejection::Invalid(m) if m.contains("key")),
        "{refused:?}"
    );
    host.settle().await.unwrap();
    let list = waft_store::TaskList {
        parent_id: Some(host.task_id.clone()),
        ..waft_store::TaskList::default()
    };
    let mut keys: Vec<Option<String>> = store
        .task_list(list)
        .await
        .unwrap()
        .into_iter()
        .map(|task| task.key)
        .collect();
    keys.sort();
    assert_eq!(keys, [Some("acme".into()), Some("globex".into())]);
}

/// A batch the store refuses stops the execution, which reports
/// nothing: its lambda was told of children that do not exist.
#[tokio::test]
async fn a_refused_batch_stops_the_execution() {
    let (store, host) = running().await;
    host.schedule(child_of("mail", 0)).await.unwrap();
    host.schedule(child_of("mail", 1)).await.unwrap();
    // The task ends under the execution, which no longer holds it.
    store
        .task_cancel(&host.task_id, SystemClock.now())
        .await
        .unwrap();
    assert!(host.settle().await.is_err());
    assert!(host.kill.reason().unwrap().contains("told were scheduled"));
    assert_eq!(children_of(store.as_ref(), &host.task_id).await.len(), 1);
    host.schedule(child_of("mail", 2)).await.unwrap_err();
    let mut done = result(0, JournalWrite::default());
    done.id = host.task_id.clone();
    assert_eq!(host.carried(done).await, None);
}
