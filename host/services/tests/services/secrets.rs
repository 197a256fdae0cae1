//! The Frontend's side of secrets: refused input, and nothing in clear
//! past it — the store holds sealed bytes that open only with the key.

use std::sync::Arc;

use waft_core::LambdaConfig;
use waft_services::secrets::SecretKey;
use waft_services::{AdminApi, ClientApi, Frontend, ServiceError, SystemClock, Wake};
use waft_store::TaskStore;

use crate::support;

async fn start(key: Option<Arc<SecretKey>>) -> (Frontend, Arc<dyn TaskStore>, tempfile::TempDir) {
    let dir = tempfile::TempDir::new().unwrap();
    let store = support::sqlite_store(&dir).await;
    let runtime = Arc::new(support::on_demand_runtime());
    let frontend = Frontend::new(
        store.clone(),
        Arc::new(SystemClock),
        runtime,
        Arc::new(Wake::default()),
    );
    let frontend = match key {
        Some(key) => frontend.secrets(key),
        None => frontend,
    };
    let hello = std::fs::read(waft_sample_artifacts::HELLO).unwrap();
    frontend
        .lambda_deploy("hello", hello, LambdaConfig::default())
        .await
        .unwrap();
    (frontend, store, dir)
}

#[tokio::test]
async fn secrets_are_sealed_before_the_store_and_bad_ones_refused() {
    let keys = tempfile::TempDir::new().unwrap();
    let key = Arc::new(SecretKey::read_or_create(&keys.path().join("k")).unwrap());
    let (frontend, store, _dir) = start(Some(key.clone())).await;

    frontend
        .secret_set("hello", "TOKEN", "tok-0123456789")
        .await
        .unwrap();
    let sealed = store.secret_sealed("hello").await.unwrap();
    let (name, bytes) = &sealed.secrets[0];
    assert_eq!(name, "TOKEN");
    assert!(!bytes.windows(14).any(|w| w == b"tok-0123456789"));
    assert_eq!(key.open("hello", "TOKEN", bytes).unwrap(), "tok-0123456789");
    let listed = frontend.secret_list("hello").await.unwrap();
    assert_eq!(listed.len(), 1);

    let too_big = "x".repeat(waft_core::Grants::MAX_VALUE + 1);
    for (lambda, name, value, refused) in [
        ("hello", "TOKEN", too_big.as_str(), "at most 65536"),
        ("hello", "bad name", "v", "not a variable name"),
        ("nope", "TOKEN", "v", "nope"),
    ] {
        let error = frontend.secret_set(lambda, name, value).await.unwrap_err();
        assert!(error.to_string().contains(refused), "{error}");
        assert!(
            matches!(
                error,
                ServiceError::InvalidArgument(_) | ServiceError::NotFound(_)
            ),
            "{error:?}"
        );
    }
    assert!(matches!(
        frontend.secret_remove("hello", "OTHER").await,
        Err(ServiceError::NotFound(_))
    ));
    // Nothing refused was stored.
    assert_eq!(store.secret_sealed("hello").await.unwrap().version, 1);

    let (keyless, _, _dir) = start(None).await;
    assert!(matches!(
        keyless.secret_set("hello", "TOKEN", "v").await,
        Err(ServiceError::FailedPrecondition(m)) if m.contains("secrets.key_file")
    ));
}
