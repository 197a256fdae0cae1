//! The Frontend's gRPC adapter over a real Frontend on SQLite, called as
//! the authentication layer leaves a call: with the caller's principal in
//! its extensions.

use std::collections::BTreeSet;
use std::sync::Arc;

use tonic::Request;
use waft_api::FrontendService;
use waft_api::proto::{self, frontend_server::Frontend as _};
use waft_core::LambdaConfig;
use waft_runtime::{Allocator, Runtime, RuntimeConfig};
use waft_services::auth::Principal;
use waft_services::{Frontend, SystemClock, Wake};
use waft_store::{LambdaDeploy, NewTask, SqliteStore, TaskInsertMany, TaskStore};

const T0: i64 = 1_800_000_000_000;

/// The adapter over a Frontend on a fresh in-memory store, and the store.
async fn frontend() -> (FrontendService, Arc<dyn TaskStore>) {
    let store: Arc<dyn TaskStore> =
        Arc::new(SqliteStore::connect("sqlite::memory:").await.unwrap());
    let runtime = Runtime::new(RuntimeConfig {
        allocator: Allocator::OnDemand,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let frontend = Frontend::new(
        store.clone(),
        Arc::new(SystemClock),
        Arc::new(runtime),
        Arc::new(Wake::default()),
    );
    (FrontendService(Arc::new(frontend)), store)
}

async fn deploy(store: &dyn TaskStore, name: &str) {
    store
        .lambda_deploy(LambdaDeploy {
            name: name.into(),
            digest: format!("digest-of-{name}"),
            component: name.as_bytes().to_vec(),
            artifact: None,
            config: LambdaConfig::default(),
            now: T0,
        })
        .await
        .unwrap();
}

/// One page of the tasks `who` may read, after `after`.
async fn page(
    service: &FrontendService,
    who: &Principal,
    after: Option<String>,
    limit: u32,
) -> Vec<proto::Task> {
    let mut request = Request::new(proto::ListTasksRequest {
        after,
        limit,
        ..Default::default()
    });
    request.extensions_mut().insert(who.clone());
    service
        .list_tasks(request)
        .await
        .unwrap()
        .into_inner()
        .tasks
}

/// A token scoped to some lambdas gets full pages of their tasks, however
/// many of other lambdas' lie between, and pages through every one.
#[tokio::test]
async fn a_scoped_token_pages_through_its_tasks_in_full_pages() {
    let (service, store) = frontend().await;
    deploy(&*store, "mail").await;
    deploy(&*store, "billing").await;
    // Three billing tasks for every mail task, each created a millisecond
    // after the last, so that ids follow the order of creation.
    let mut mail = Vec::new();
    for i in 0..48 {
        let lambda = if i % 4 == 3 { "mail" } else { "billing" };
        let inserted = store
            .task_insert_many(TaskInsertMany {
                tasks: vec![NewTask {
                    lambda: lambda.into(),
                    ..NewTask::default()
                }],
                now: T0 + i,
            })
            .await
            .unwrap();
        if lambda == "mail" {
            mail.push(inserted[0].id.clone());
        }
    }

    let who = Principal::Scheduler(BTreeSet::from(["mail".to_owned()]));
    let limit = 5;
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let tasks = page(&service, &who, after.clone(), limit).await;
        assert!(tasks.iter().all(|t| t.lambda == "mail"), "{tasks:?}");
        seen.extend(tasks.iter().map(|t| t.id.clone()));
        // A short page is the last, as a client pages.
        if tasks.len() < limit as usize {
            break;
        }
        after = tasks.last().map(|t| t.id.clone());
    }
    assert_eq!(seen, mail, "pages of {limit} from a token for mail");

    // A token for no lambda sees nothing.
    let nobody = Principal::Owner(BTreeSet::new());
    assert!(page(&service, &nobody, None, limit).await.is_empty());
}
