//! Compiled artifacts: what one engine compiled, another with the same
//! fingerprint loads and runs — but only under a seal that verifies for
//! that component, that engine and that key. Every other artifact is
//! refused before wasmtime reads a byte of it.

use std::sync::Arc;

use waft_runtime::{
    Allocator, ArtifactKey, Digest, KillSwitch, LoadError, Outcome, RecordingHost, Runtime,
    RuntimeConfig, TaskInput,
};

fn runtime(fuel: bool, allocator: Allocator) -> Runtime {
    Runtime::new(RuntimeConfig {
        fuel,
        allocator,
        max_instances: 4,
        ..RuntimeConfig::default()
    })
    .unwrap()
}

fn task() -> TaskInput {
    TaskInput {
        id: "t1".into(),
        lambda: "hello".into(),
        collection: "default".into(),
        priority: 0,
        attempt: 1,
        scheduled_at: std::time::SystemTime::now(),
        payload: br#"{"name":"Ada"}"#.to_vec(),
        journal: Vec::new(),
    }
}

fn refused(result: Result<waft_runtime::PreparedLambda, LoadError>) -> String {
    match result {
        Err(LoadError::ArtifactRefused(why)) => why,
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(_) => panic!("a bad artifact was loaded"),
    }
}

#[tokio::test]
async fn an_artifact_compiled_by_one_engine_runs_in_another_with_its_fingerprint() {
    let wasm = std::fs::read(waft_sample_artifacts::HELLO).unwrap();
    let key = ArtifactKey::new(&[7; 32]);
    // The Frontend's engine allocates on demand, an executor's pools.
    let frontend = runtime(true, Allocator::OnDemand);
    let executor = runtime(true, Allocator::Auto);
    assert_eq!(frontend.fingerprint(), executor.fingerprint());

    let artifact = frontend.prepare(&wasm).await.unwrap().seal(&key).unwrap();
    assert_eq!(artifact.engine, frontend.fingerprint());
    let lambda = executor
        .prepare_sealed(Digest::of(&wasm), artifact, &key)
        .await
        .unwrap();
    let execution = lambda
        .run(
            task(),
            &Default::default(),
            Arc::new(RecordingHost::default()),
            &KillSwitch::new(),
        )
        .await;
    match execution.outcome {
        Outcome::Success { output } => {
            assert_eq!(output, Some(br#"{"greeting":"Hello, Ada!"}"#.to_vec()));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn only_an_artifact_sealed_for_this_component_engine_and_key_is_loaded() {
    let wasm = std::fs::read(waft_sample_artifacts::HELLO).unwrap();
    let other = std::fs::read(waft_sample_artifacts::FLAKY).unwrap();
    let key = ArtifactKey::new(&[7; 32]);
    let runtime = runtime(true, Allocator::OnDemand);
    let artifact = runtime.prepare(&wasm).await.unwrap().seal(&key).unwrap();
    let digest = Digest::of(&wasm);

    // A flipped byte of code.
    let mut tampered = artifact.clone();
    let middle = tampered.bytes.len() / 2;
    tampered.bytes[middle] ^= 1;
    let why = refused(runtime.prepare_sealed(digest, tampered, &key).await);
    assert!(why.contains("seal"), "{why}");

    // Another installation's key.
    let why = refused(
        runtime
            .prepare_sealed(digest, artifact.clone(), &ArtifactKey::new(&[8; 32]))
            .await,
    );
    assert!(why.contains("seal"), "{why}");

    // Sealed for another component: an artifact moved to another row.
    let why = refused(
        runtime
            .prepare_sealed(Digest::of(&other), artifact.clone(), &key)
            .await,
    );
    assert!(why.contains("seal"), "{why}");

    // A seal forged by truncation, or none at all.
    let mut unsealed = artifact.clone();
    unsealed.seal.truncate(4);
    refused(runtime.prepare_sealed(digest, unsealed, &key).await);

    // Compiled by an engine with other settings (fuel off): refused by its
    // fingerprint, whatever the seal says.
    let fuelless = self::runtime(false, Allocator::OnDemand);
    assert_ne!(fuelless.fingerprint(), runtime.fingerprint());
    let why = refused(
        fuelless
            .prepare_sealed(digest, artifact.clone(), &key)
            .await,
    );
    assert!(why.contains("fingerprint"), "{why}");

    // And the genuine one loads.
    runtime
        .prepare_sealed(digest, artifact, &key)
        .await
        .unwrap();
}
