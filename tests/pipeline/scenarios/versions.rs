//! A lambda's versions: a new deploy applies to the next task without a
//! restart, a task pinned to an older version runs it, a rollback makes an
//! older one current again, and an unknown version is not found.

use serde_json::json;

use waft_core::TaskStatus;
use waft_sample_artifacts as samples;
use waft_services::{ClientApi, ServiceError, TaskRequest};

use super::helpers::WITHIN;
use crate::support::Cluster;

pub async fn new_versions_apply_without_restart(cluster: &Cluster) {
    cluster.deploy("swap", samples::HELLO, |_| {}).await;
    let id = cluster.schedule("swap", json!({"name": "v1"}), None).await;
    assert_eq!(
        cluster.finished(&id, WITHIN).await.status,
        TaskStatus::Success
    );
    let v2 = cluster.deploy("swap", samples::FATAL, |_| {}).await;
    assert_eq!(v2.version, 2);
    let id = cluster.schedule("swap", json!({}), None).await;
    let task = cluster.finished(&id, WITHIN).await;
    assert_eq!(task.status, TaskStatus::FatalFailure, "{task:#?}");

    // A task pinned to version 1 runs it while version 2 is current.
    let pinned = cluster.cli(&[
        "task",
        "schedule",
        "swap",
        "--payload",
        r#"{"name": "pinned"}"#,
        "--pin-version",
        "1",
    ]);
    let task = cluster.finished(pinned.trim(), WITHIN).await;
    assert_eq!(
        (task.status, task.version),
        (TaskStatus::Success, Some(1)),
        "{task:#?}"
    );

    // Roll back: version 3 is version 1 again.
    let rolled: serde_json::Value =
        serde_json::from_str(&cluster.cli(&["lambda", "rollback", "swap", "--json"])).unwrap();
    assert_eq!(rolled["version"], 3);
    assert_eq!(
        rolled["digest"],
        json!(
            cluster
                .frontend
                .lambda_get("swap", Some(1))
                .await
                .unwrap()
                .digest
        )
    );
    let id = cluster.schedule("swap", json!({"name": "v3"}), None).await;
    assert_eq!(
        cluster.finished(&id, WITHIN).await.status,
        TaskStatus::Success
    );
    let versions = cluster.cli(&["lambda", "versions", "swap"]);
    assert_eq!(versions.lines().count(), 3, "{versions}");

    let unknown = cluster
        .frontend
        .lambda_rollback("swap", Some(9))
        .await
        .unwrap_err();
    assert!(matches!(unknown, ServiceError::NotFound(_)), "{unknown:?}");
    let pin = TaskRequest {
        lambda: "swap".into(),
        version: Some(9),
        ..TaskRequest::default()
    };
    let unknown = cluster
        .frontend
        .task_schedule_many(vec![pin])
        .await
        .unwrap_err();
    assert!(matches!(unknown, ServiceError::NotFound(_)), "{unknown:?}");
}
