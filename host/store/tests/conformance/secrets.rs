//! Secrets: kept sealed, listed by name, versioned per lambda.

use waft_store::{LambdaDelete, SecretSet, StoreError, TaskClaimMany, TaskStore};

use crate::support::*;

/// Setting, replacing and removing a secret each bump the lambda's secrets
/// version, which claims carry; a lambda sees only its own.
pub async fn secrets_are_kept_sealed_and_versioned(store: &dyn TaskStore) {
    deploy(store, "mail").await;
    deploy(store, "billing").await;
    let set = |lambda: &str, name: &str, sealed: &[u8], now| SecretSet {
        lambda: lambda.into(),
        name: name.into(),
        sealed: sealed.to_vec(),
        now,
    };
    assert_eq!(store.secret_sealed("mail").await.unwrap().version, 0);
    store
        .secret_set(set("mail", "TOKEN", b"\x00sealed\xff", T0))
        .await
        .unwrap();
    store
        .secret_set(set("mail", "API_KEY", b"k1", T0 + 1))
        .await
        .unwrap();
    store
        .secret_set(set("mail", "TOKEN", b"rotated", T0 + 2))
        .await
        .unwrap();
    let sealed = store.secret_sealed("mail").await.unwrap();
    assert_eq!(sealed.version, 3);
    assert_eq!(
        sealed.secrets,
        vec![
            ("API_KEY".to_owned(), b"k1".to_vec()),
            ("TOKEN".to_owned(), b"rotated".to_vec())
        ]
    );
    let listed = store.secret_list("mail").await.unwrap();
    assert_eq!(
        listed
            .iter()
            .map(|s| (s.name.as_str(), s.updated_at))
            .collect::<Vec<_>>(),
        [("API_KEY", T0 + 1), ("TOKEN", T0 + 2)]
    );
    assert!(
        store
            .secret_sealed("billing")
            .await
            .unwrap()
            .secrets
            .is_empty()
    );

    // A claim carries the version.
    let id = insert(store, new_task("mail"), T0).await;
    let report = poll(store, T0).await;
    let claimed = store
        .task_claim_many(TaskClaimMany {
            claims: vec![(id, report.enqueued[0].enqueue_token)],
            now: T0,
            claim_timeout: CLAIM_TIMEOUT,
        })
        .await
        .unwrap()
        .remove(0)
        .unwrap();
    assert_eq!(claimed.secrets_version, 3);

    assert!(store.secret_remove("mail", "TOKEN").await.unwrap());
    assert!(!store.secret_remove("mail", "TOKEN").await.unwrap());
    assert_eq!(store.secret_sealed("mail").await.unwrap().version, 4);

    assert!(matches!(
        store.secret_set(set("nope", "X", b"x", T0)).await,
        Err(StoreError::UnknownLambda(_))
    ));
    assert!(matches!(
        store.secret_set(set("mail", "bad name", b"x", T0)).await,
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        store.secret_list("nope").await,
        Err(StoreError::UnknownLambda(_))
    ));
}

/// A lambda deployed again under a deleted one's name is another lambda:
/// its versions and its secrets versions go on past its predecessor's, and
/// its claims carry them, so nothing kept by those numbers (an executor's
/// loaded code, grants and limits, its opened secrets) is taken for the new
/// lambda's.
pub async fn a_name_deployed_again_never_repeats_a_version(store: &dyn TaskStore) {
    let set = |value: &[u8]| SecretSet {
        lambda: "mail".into(),
        name: "TOKEN".into(),
        sealed: value.to_vec(),
        now: T0,
    };
    let delete = || LambdaDelete {
        name: "mail".into(),
        drop_tasks: true,
    };
    deploy(store, "mail").await;
    deploy(store, "mail").await;
    store.secret_set(set(b"first")).await.unwrap();
    insert(store, new_task("mail"), T0).await;
    store.lambda_delete(delete()).await.unwrap();

    deploy(store, "mail").await;
    let lambda = store.lambda_get("mail").await.unwrap().unwrap();
    assert_eq!(
        lambda.version, 3,
        "a version of the deleted lambda repeated"
    );
    assert!(store.lambda_get_version("mail", 1).await.unwrap().is_none());
    let sealed = store.secret_sealed("mail").await.unwrap();
    assert!(sealed.secrets.is_empty());
    assert!(
        sealed.version > 1,
        "the new lambda's secrets version {} repeats its predecessor's",
        sealed.version
    );
    store.secret_set(set(b"second")).await.unwrap();
    let id = insert(store, new_task("mail"), T0).await;
    let report = poll(store, T0).await;
    let claimed = store
        .task_claim_many(TaskClaimMany {
            claims: vec![(id, report.enqueued[0].enqueue_token)],
            now: T0,
            claim_timeout: CLAIM_TIMEOUT,
        })
        .await
        .unwrap()
        .remove(0)
        .unwrap();
    assert_eq!(claimed.lambda_version, 3);
    assert_eq!(claimed.secrets_version, sealed.version + 1);

    // Deleted again: past both again.
    let before = claimed.secrets_version;
    store.lambda_delete(delete()).await.unwrap();
    deploy(store, "mail").await;
    assert_eq!(store.lambda_get("mail").await.unwrap().unwrap().version, 4);
    assert!(store.secret_sealed("mail").await.unwrap().version > before);

    // A name never deleted starts at the beginning.
    deploy(store, "billing").await;
    assert_eq!(
        store.lambda_get("billing").await.unwrap().unwrap().version,
        1
    );
    assert_eq!(store.secret_sealed("billing").await.unwrap().version, 0);
}
