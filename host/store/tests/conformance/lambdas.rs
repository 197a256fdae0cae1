//! Lambdas: versions, pinning, rollback, garbage collection.

use std::time::Duration;

use waft_core::LambdaConfig;
use waft_store::{
    GcReport, LambdaDeploy, LambdaGc, LambdaRollback, NewTask, StoreError, TaskClaimMany,
    TaskInsertMany, TaskStore,
};

use crate::support::*;

pub async fn lambdas_are_versioned(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    let v2 = store
        .lambda_deploy(LambdaDeploy {
            name: "mail".into(),
            digest: "digest-two".into(),
            component: b"two".to_vec(),
            artifact: None,
            config: LambdaConfig {
                max_attempts: 9,
                ..config()
            },
            now: T0 + 1,
        })
        .await
        .unwrap();
    assert_eq!((v2.version, v2.config.max_attempts), (2, 9));
    assert_eq!(store.lambda_get("mail").await.unwrap().unwrap().version, 2);
    let v1 = store.lambda_get_version("mail", 1).await.unwrap().unwrap();
    assert_eq!(v1.config, config());
    assert_eq!(
        store.component_get("digest-two").await.unwrap().unwrap(),
        b"two"
    );
    assert_eq!(store.lambda_list().await.unwrap().len(), 1);
    assert!(store.lambda_get("nope").await.unwrap().is_none());

    let bad = store
        .lambda_deploy(LambdaDeploy {
            name: "Bad Name".into(),
            digest: "d".into(),
            component: vec![],
            artifact: None,
            config: config(),
            now: T0,
        })
        .await;
    assert!(matches!(bad, Err(StoreError::InvalidName(_))), "{bad:?}");
}

/// Deploys version `n` of `mail` with its own component.
async fn deploy_version(store: &dyn TaskStore, n: u32) {
    let lambda = store
        .lambda_deploy(LambdaDeploy {
            name: "mail".into(),
            digest: format!("digest-{n}"),
            component: format!("component {n}").into_bytes(),
            artifact: None,
            config: LambdaConfig {
                max_attempts: n,
                ..config()
            },
            now: T0,
        })
        .await
        .unwrap();
    assert_eq!(lambda.version, n);
}

/// A pinned task runs its version; an unpinned one the version current at
/// its claim. A rollback makes an earlier version current again as a new
/// version. Garbage collection keeps the newest versions, the pinned ones
/// and the components they use.
pub async fn versions_pin_roll_back_and_are_collected(store: &dyn TaskStore) {
    for n in 1..=4 {
        deploy_version(store, n).await;
    }
    let pinned = insert(
        store,
        NewTask {
            version: Some(1),
            ..new_task("mail")
        },
        T0,
    )
    .await;
    let current = insert(store, new_task("mail"), T0).await;
    let report = poll(store, T0).await;
    let claims: Vec<_> = report
        .enqueued
        .iter()
        .map(|t| (t.id.clone(), t.enqueue_token))
        .collect();
    let claimed = store
        .task_claim_many(TaskClaimMany {
            claims,
            now: T0,
            claim_timeout: Duration::from_secs(10),
        })
        .await
        .unwrap();
    for answer in claimed {
        let task = answer.unwrap();
        let expected = if task.id == pinned { 1 } else { 4 };
        assert_eq!(task.lambda_version, expected, "{}", task.id);
    }
    assert_eq!(
        store.task_get(&pinned).await.unwrap().unwrap().version,
        Some(1)
    );
    assert_eq!(
        store.task_get(&current).await.unwrap().unwrap().version,
        None
    );
    let unknown = store
        .task_insert_many(TaskInsertMany {
            tasks: vec![NewTask {
                version: Some(9),
                ..new_task("mail")
            }],
            now: T0,
        })
        .await;
    assert!(
        matches!(unknown, Err(StoreError::UnknownVersion { version: 9, .. })),
        "{unknown:?}"
    );

    // Roll back to the previous version: version 5, a copy of version 3.
    let back = store
        .lambda_rollback(LambdaRollback {
            name: "mail".into(),
            to: None,
            now: T0,
        })
        .await
        .unwrap();
    assert_eq!(
        (back.version, back.digest.as_str(), back.config.max_attempts),
        (5, "digest-3", 3)
    );
    let again = store
        .lambda_rollback(LambdaRollback {
            name: "mail".into(),
            to: Some(5),
            now: T0,
        })
        .await;
    assert!(matches!(again, Err(StoreError::Invalid(_))), "{again:?}");

    // Keep two: versions 4 and 5 stay, 1 stays for its pinned task, 2 and 3
    // go; digest-3 is still used by version 5, digest-2 by nothing.
    let report = store
        .lambda_gc(LambdaGc {
            lambda: "mail".into(),
            keep: 2,
        })
        .await
        .unwrap();
    assert_eq!(
        report,
        GcReport {
            versions: 2,
            components: 1
        }
    );
    let left: Vec<u32> = store
        .lambda_versions("mail")
        .await
        .unwrap()
        .iter()
        .map(|v| v.lambda.version)
        .collect();
    assert_eq!(left, [1, 4, 5]);
    assert!(store.component_get("digest-2").await.unwrap().is_none());
    assert!(store.component_get("digest-3").await.unwrap().is_some());
    let gone = store
        .lambda_rollback(LambdaRollback {
            name: "mail".into(),
            to: Some(2),
            now: T0,
        })
        .await;
    assert!(
        matches!(gone, Err(StoreError::UnknownVersion { version: 2, .. })),
        "{gone:?}"
    );
    assert!(matches!(
        store.lambda_versions("nope").await,
        Err(StoreError::UnknownLambda(_))
    ));
}

/// Grants are kept with each version, any bytes a variable holds included,
/// and a rollback restores the version's own.
pub async fn grants_are_kept_with_each_version(store: &dyn TaskStore) {
    let granted = LambdaConfig {
        grants: waft_core::Grants {
            outbound: vec![
                "https://api.example.com".parse().unwrap(),
                "http://10.0.0.0/8:*".parse().unwrap(),
            ],
            outbound_limits: waft_core::OutboundLimits {
                max_requests: 3,
                first_byte_timeout: Duration::from_millis(1500),
                ..Default::default()
            },
            env: [
                ("REGION".to_owned(), "eu-west-1".to_owned()),
                ("ODD".to_owned(), "a\0b\\0\"c\"\n🦀".to_owned()),
            ]
            .into(),
        },
        ..config()
    };
    deploy_with(store, "mail", granted.clone()).await;
    deploy(store, "mail").await;
    assert_eq!(
        store
            .lambda_get_version("mail", 1)
            .await
            .unwrap()
            .unwrap()
            .config,
        granted
    );
    assert_eq!(
        store
            .lambda_get("mail")
            .await
            .unwrap()
            .unwrap()
            .config
            .grants,
        waft_core::Grants::default()
    );
    let back = store
        .lambda_rollback(LambdaRollback {
            name: "mail".into(),
            to: Some(1),
            now: T0 + 5,
        })
        .await
        .unwrap();
    assert_eq!(back.config, granted);
}

/// A task pinned to a version, by its schedule or by a redrive, retries with
/// that version's backoff and attempt budget, not the current version's;
/// an unpinned task with the current one's.
pub async fn a_pinned_task_retries_with_its_versions_policy(store: &dyn TaskStore) {
    // Version 1: two attempts, 10 s backoff. Version 2: five attempts,
    // 1000 s backoff, so a delay tells which version's policy was used.
    deploy_with(
        store,
        "mail",
        LambdaConfig {
            max_attempts: 2,
            ..config()
        },
    )
    .await;
    let slow = LambdaConfig {
        max_attempts: 5,
        backoff: waft_core::Backoff {
            base: Duration::from_secs(1000),
            factor: 2.0,
            max: Duration::from_secs(10_000),
        },
        ..config()
    };
    deploy_with(store, "mail", slow).await;
    let retry_at = |id: String| async move {
        let task = store.task_get(&id).await.unwrap().unwrap();
        task.next_trigger_at.unwrap()
    };

    // Pinned at its schedule: version 1's 10 s (with jitter, 5..=10 s) ...
    let pinned = insert(
        store,
        NewTask {
            version: Some(1),
            ..new_task("mail")
        },
        T0,
    )
    .await;
    let lease = start(store, &pinned, T0).await;
    assert_eq!(
        finish(store, &pinned, lease, retriable("busy"), T0).await,
        Ok(waft_core::TaskStatus::RetriableFailure)
    );
    let next = retry_at(pinned.clone()).await;
    assert!((T0 + 5_000..=T0 + 10_000).contains(&next), "{}", next - T0);
    // ... and its two attempts: the second failure is the last.
    let lease = start(store, &pinned, next).await;
    assert_eq!(
        finish(store, &pinned, lease, retriable("busy"), next).await,
        Ok(waft_core::TaskStatus::Dead)
    );

    // Unpinned: the current version's 1000 s (500..=1000 s).
    let current = insert(store, new_task("mail"), T0).await;
    let lease = start(store, &current, T0).await;
    finish(store, &current, lease, retriable("busy"), T0)
        .await
        .unwrap();
    let next = retry_at(current).await;
    assert!(
        (T0 + 500_000..=T0 + 1_000_000).contains(&next),
        "{}",
        next - T0
    );

    // Redriven onto version 1: its backoff and budget again.
    let later = T0 + 2_000_000;
    store
        .dead_redrive(waft_store::DeadRedrive {
            selector: waft_store::DeadSelector::Ids(vec![pinned.clone()]),
            version: Some(1),
            fresh: false,
            now: later,
        })
        .await
        .unwrap();
    let lease = start(store, &pinned, later).await;
    finish(store, &pinned, lease, retriable("busy"), later)
        .await
        .unwrap();
    let next = retry_at(pinned.clone()).await;
    assert!(
        (later + 5_000..=later + 10_000).contains(&next),
        "{}",
        next - later
    );
    let lease = start(store, &pinned, next).await;
    assert_eq!(
        finish(store, &pinned, lease, retriable("busy"), next).await,
        Ok(waft_core::TaskStatus::Dead)
    );
}
