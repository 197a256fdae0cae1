//! Tokens and their rights: what an owner's and a scheduler's token may
//! do, a call without a token or with a revoked one refused, and the
//! internal roles reached with the cluster token alone. The distributed
//! installation runs with auth on; `waft dev` runs without, and says so.

use std::time::Duration;

use serde_json::json;

use waft_core::{LambdaConfig, TaskStatus};
use waft_sample_artifacts as samples;
use waft_services::{AdminApi, ClientApi, ServiceError, TaskRequest};
use waft_store::GateState;

use super::helpers::WITHIN;
use crate::support::Cluster;

fn denied<T>(result: Result<T, ServiceError>) {
    match result {
        Err(ServiceError::PermissionDenied(_)) => {}
        Err(other) => panic!("expected PermissionDenied, got {other:?}"),
        Ok(_) => panic!("expected PermissionDenied, got success"),
    }
}

/// Tokens: an owner acts on its lambdas only, a scheduler schedules and
/// reads but manages nothing, a call without a token or with a revoked one
/// is refused, and only the cluster token reaches the internal roles. The
/// distributed mode runs with auth on; `waft dev` runs without and says so.
pub async fn auth(cluster: &Cluster) {
    let Some(admin) = &cluster.token else {
        assert!(cluster.logs().contains("auth is off"), "{}", cluster.logs());
        return;
    };
    let create = |name: &str, role: &str| {
        let created = cluster.cli(&[
            "token", "create", name, "--role", role, "--lambda", "hello", "--json",
        ]);
        let created: serde_json::Value = serde_json::from_str(&created).unwrap();
        (
            created["id"].as_str().unwrap().to_owned(),
            created["secret"].as_str().unwrap().to_owned(),
        )
    };
    let (owner_id, owner_secret) = create("hello team", "owner");
    let (_, scheduler_secret) = create("hello scheduler", "scheduler");
    let client = |secret: Option<&str>| {
        waft_api::FrontendClient::new(cluster.channel(&cluster.frontend_addr, secret))
    };
    let hello = std::fs::read(samples::HELLO).unwrap();
    let flaky_task = cluster.schedule("flaky", json!({}), None).await;

    let owner = client(Some(&owner_secret));
    let mine = owner
        .task_schedule_many(vec![TaskRequest {
            lambda: "hello".into(),
            ..TaskRequest::default()
        }])
        .await
        .unwrap();
    assert_eq!(
        cluster.finished(&mine[0].id, WITHIN).await.status,
        TaskStatus::Success
    );
    owner.task_get(&mine[0].id).await.unwrap();
    denied(owner.task_get(&flaky_task).await);
    denied(
        owner
            .lambda_deploy("flaky", hello.clone(), Default::default())
            .await,
    );
    denied(owner.gate_set("flaky", None, GateState::Paused).await);
    denied(owner.token_list().await);
    // Allowing hello to schedule flaky's tasks would hand on a right the
    // owner does not have.
    denied(
        owner
            .lambda_deploy(
                "hello",
                hello.clone(),
                LambdaConfig {
                    allowed_children: vec!["flaky".into()],
                    ..Default::default()
                },
            )
            .await,
    );
    let visible: Vec<String> = owner
        .lambda_list()
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.name)
        .collect();
    assert_eq!(visible, ["hello"]);

    let scheduler = client(Some(&scheduler_secret));
    let scheduled = scheduler
        .task_schedule_many(vec![TaskRequest {
            lambda: "hello".into(),
            ..TaskRequest::default()
        }])
        .await
        .unwrap();
    scheduler.task_get(&scheduled[0].id).await.unwrap();
    // A continuation of a lambda the token may not schedule is refused: the
    // store would create that task later without asking anyone.
    denied(
        scheduler
            .task_schedule_many(vec![TaskRequest {
                lambda: "hello".into(),
                then: Some(waft_store::Continuation {
                    lambda: "flaky".into(),
                    ..Default::default()
                }),
                ..TaskRequest::default()
            }])
            .await,
    );
    denied(scheduler.gate_set("hello", None, GateState::Paused).await);
    denied(
        scheduler
            .lambda_deploy("hello", hello, Default::default())
            .await,
    );
    // The internal roles take only the cluster token: the HSC knows the
    // client tokens and refuses this one's right, the Controller knows none.
    let channel = |role: &str| {
        let addr = cluster.processes[role].listen();
        cluster.channel(&addr, Some(&scheduler_secret))
    };
    let hsc = waft_api::HscClient::new(channel("hsc"));
    denied(waft_services::HscApi::task_claim_many(&hsc, Vec::new()).await);
    let controller = waft_api::ControllerClient::new(channel("controller"));
    let next = waft_services::ControllerApi::next_work(
        &controller,
        waft_services::NextWork {
            slots: Vec::new(),
            max_tasks: 1,
            wait: Duration::ZERO,
        },
    )
    .await;
    assert!(
        matches!(next, Err(ServiceError::Unauthenticated(_))),
        "{next:?}"
    );

    // No token, or a revoked one: refused, and the CLI says so with code 8.
    let anonymous = client(None).lambda_list().await.unwrap_err();
    assert!(
        matches!(anonymous, ServiceError::Unauthenticated(_)),
        "{anonymous:?}"
    );
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_waft"))
        .args(["lambda", "list"])
        .env("WAFT_SERVER", &cluster.frontend_addr)
        .env("WAFT_CA", &cluster.ca.as_ref().unwrap().1)
        .env_remove("WAFT_TOKEN")
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(8),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stderr).contains("token"));
    cluster.cli(&["token", "revoke", &owner_id]);
    let revoked = owner.lambda_list().await.unwrap_err();
    assert!(
        matches!(revoked, ServiceError::Unauthenticated(_)),
        "{revoked:?}"
    );
    let listed = cluster.cli(&["token", "list", "--json"]);
    assert!(!listed.contains(&owner_secret) && !listed.contains(admin.as_str()));
    assert!(listed.contains("revoked_at"), "{listed}");
}
