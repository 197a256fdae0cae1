//! Who may call the Controller and the HSC: the installation's own
//! processes, which present the cluster token, and no one else. An admin
//! token has every right a client may have (`rights.rs`), but none of an
//! executor's: with it one could claim tasks, or write journal entries and
//! results under a running task's lease. Every call of both services, over
//! a real server with auth on, against every kind of token.

use std::sync::Arc;

use async_trait::async_trait;
use tokio::net::TcpListener;
use tonic::Code;
use waft_api::proto::controller_client::ControllerClient as RawController;
use waft_api::proto::hsc_client::HscClient as RawHsc;
use waft_api::{ChannelOptions, Roles, proto};
use waft_core::LambdaConfig;
use waft_runtime::{Allocator, Runtime, RuntimeConfig};
use waft_services::auth::Authenticator;
use waft_services::{
    AdminApi, ClientApi, ControllerApi, Frontend, HeartbeatConfig, Hsc, HscApi, NextWork,
    ServiceResult, SystemClock, TaskRequest, Wake,
};
use waft_store::{ClaimedTask, LambdaDeploy, SqliteStore, TaskStore, TokenRole};

/// The installation's own token.
const CLUSTER: &str = "the-cluster-token-of-the-cluster-only-tests-0123";

/// A Controller that hands out nothing.
struct Idle;

#[async_trait]
impl ControllerApi for Idle {
    async fn next_work(&self, _: NextWork) -> ServiceResult<Vec<ClaimedTask>> {
        Ok(Vec::new())
    }
}

/// Every call of the Controller and the HSC, made with `token`: each
/// answer's code (`Ok` when answered).
async fn codes(address: &str, token: Option<&str>, task: &str) -> Vec<(&'static str, Code)> {
    let options = ChannelOptions { token, ca: None };
    let channel = waft_api::channel_with(address, options).unwrap();
    let mut hsc = RawHsc::new(channel.clone());
    let mut controller = RawController::new(channel);
    let code =
        |answer: Result<_, tonic::Status>| answer.map_or_else(|s| s.code(), |_: ()| Code::Ok);
    let id = || task.to_owned();
    vec![
        (
            "NextWork",
            code(
                controller
                    .next_work(proto::NextWorkRequest::default())
                    .await
                    .map(drop),
            ),
        ),
        (
            "ClaimTasks",
            code(
                hsc.claim_tasks(proto::ClaimTasksRequest::default())
                    .await
                    .map(drop),
            ),
        ),
        (
            "Heartbeat",
            code(
                hsc.heartbeat(proto::HeartbeatRequest::default())
                    .await
                    .map(drop),
            ),
        ),
        (
            "SetResults",
            code(
                hsc.set_results(proto::SetResultsRequest::default())
                    .await
                    .map(drop),
            ),
        ),
        (
            "WriteJournal",
            code(
                hsc.write_journal(proto::WriteJournalRequest {
                    task_id: id(),
                    lease_token: 1,
                    ..Default::default()
                })
                .await
                .map(drop),
            ),
        ),
        (
            "ReadJournal",
            code(
                hsc.read_journal(proto::ReadJournalRequest {
                    task_id: id(),
                    lease_token: 1,
                    from: 0,
                    limit: 10,
                })
                .await
                .map(drop),
            ),
        ),
        (
            "ReadSignal",
            code(
                hsc.read_signal(proto::ReadSignalRequest {
                    task_id: id(),
                    lease_token: 1,
                    name: "go".into(),
                    taken: 0,
                })
                .await
                .map(drop),
            ),
        ),
        (
            "ReadChildren",
            code(
                hsc.read_children(proto::ReadChildrenRequest {
                    task_id: id(),
                    lease_token: 1,
                    children: Vec::new(),
                })
                .await
                .map(drop),
            ),
        ),
    ]
}

#[tokio::test]
async fn the_controller_and_hsc_answer_the_cluster_token_alone() {
    let store: Arc<dyn TaskStore> =
        Arc::new(SqliteStore::connect("sqlite::memory:").await.unwrap());
    let runtime = Runtime::new(RuntimeConfig {
        allocator: Allocator::OnDemand,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let frontend = Arc::new(Frontend::new(
        store.clone(),
        Arc::new(SystemClock),
        Arc::new(runtime),
        Arc::new(Wake::default()),
    ));
    let hsc: Arc<dyn HscApi> = Arc::new(Hsc::new(
        store.clone(),
        Arc::new(SystemClock),
        HeartbeatConfig::default(),
    ));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let roles = Roles {
        frontend: Some(frontend.clone()),
        controller: Some(Arc::new(Idle)),
        hsc: Some(hsc),
        auth: Some(Arc::new(Authenticator::new(
            Some(store.clone()),
            Some(CLUSTER),
        ))),
        ..Roles::default()
    };
    tokio::spawn(waft_api::serve(listener, roles, std::future::pending()));
    let deploy = LambdaDeploy {
        name: "pay".into(),
        digest: "digest-of-pay".into(),
        component: b"pay".to_vec(),
        artifact: None,
        config: LambdaConfig::default(),
        now: 1_800_000_000_000,
    };
    store.lambda_deploy(deploy).await.unwrap();
    let task = TaskRequest {
        lambda: "pay".into(),
        ..TaskRequest::default()
    };
    let task = frontend.task_schedule_many(vec![task]).await.unwrap();
    let task = &task[0].id;

    let mut wrong = Vec::new();
    for (role, lambdas) in [
        (TokenRole::Admin, vec![]),
        (TokenRole::Owner, vec!["pay".to_owned()]),
        (TokenRole::Scheduler, vec!["pay".to_owned()]),
    ] {
        let (_, secret) = frontend.token_create("t", role, lambdas).await.unwrap();
        for (call, code) in codes(&address, Some(&secret), task).await {
            if code != Code::PermissionDenied {
                wrong.push(format!("{call} with a token of role {role:?}: {code:?}"));
            }
        }
    }
    for (call, code) in codes(&address, None, task).await {
        if code != Code::Unauthenticated {
            wrong.push(format!("{call} with no token: {code:?}"));
        }
    }
    // The cluster token is answered: past the door, whatever the call's
    // own answer.
    for (call, code) in codes(&address, Some(CLUSTER), task).await {
        if matches!(code, Code::PermissionDenied | Code::Unauthenticated) {
            wrong.push(format!("{call} with the cluster token: {code:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
