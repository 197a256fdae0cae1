//! Compiled artifacts: kept beside their component, one per engine
//! fingerprint, replaced by a later compile, and deleted with the
//! component once no version uses it.

use waft_store::{Artifact, LambdaDeploy, LambdaGc, TaskStore};

use crate::support::*;

fn artifact(engine: &str, bytes: &[u8]) -> Artifact {
    Artifact {
        engine: engine.into(),
        bytes: bytes.to_vec(),
        seal: format!("seal of {engine}").into_bytes(),
    }
}

async fn deploy_compiled(store: &dyn TaskStore, digest: &str, artifact: Artifact, now: i64) {
    store
        .lambda_deploy(LambdaDeploy {
            name: "resize".into(),
            digest: digest.into(),
            component: format!("component {digest}").into_bytes(),
            artifact: Some(artifact),
            config: config(),
            now,
        })
        .await
        .unwrap();
}

/// Whether the store has component `digest`'s artifact for `engine`.
async fn kept(store: &dyn TaskStore, digest: &str, engine: &str) -> bool {
    store.artifact_get(digest, engine).await.unwrap().is_some()
}

pub async fn artifacts_are_kept_per_engine_and_collected_with_their_component(
    store: &dyn TaskStore,
) {
    // Every byte value survives the round trip.
    let code: Vec<u8> = (0..=255).cycle().take(70_000).collect();
    deploy_compiled(store, "d1", artifact("engine-a", &code), T0).await;
    let found = store.artifact_get("d1", "engine-a").await.unwrap().unwrap();
    assert_eq!(found, artifact("engine-a", &code));
    assert!(!kept(store, "d1", "engine-b").await);
    assert!(!kept(store, "d2", "engine-a").await);

    // The same component deployed again by a Frontend of another engine
    // adds its artifact; by one of the same engine, replaces it.
    deploy_compiled(store, "d1", artifact("engine-b", b"b"), T0 + 1).await;
    deploy_compiled(store, "d1", artifact("engine-a", b"recompiled"), T0 + 2).await;
    let a = store.artifact_get("d1", "engine-a").await.unwrap().unwrap();
    assert_eq!(a.bytes, b"recompiled");
    assert!(kept(store, "d1", "engine-b").await);

    // Once no kept version uses the component, its artifacts go with it.
    deploy_compiled(store, "d2", artifact("engine-a", b"two"), T0 + 3).await;
    let report = store
        .lambda_gc(LambdaGc {
            lambda: "resize".into(),
            keep: 1,
        })
        .await
        .unwrap();
    assert_eq!(report.components, 1);
    assert!(!kept(store, "d1", "engine-a").await);
    assert!(!kept(store, "d1", "engine-b").await);
    assert!(kept(store, "d2", "engine-a").await);
}
