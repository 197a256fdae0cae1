//! A task's journal as the Frontend answers people and local replays, on
//! SQLite and on Postgres: answers come a bounded page at a time, and each
//! value of the lambda's secrets is masked in every answer of every page,
//! nested and overlapping values included.

use std::sync::Arc;
use std::time::Duration;

use waft_core::LambdaConfig;
use waft_services::api::JournalQuery;
use waft_services::secrets::SecretKey;
use waft_services::{AdminApi, ClientApi, Frontend, SystemClock, Wake};
use waft_store::{
    JournalEntry, JournalWrite, NewTask, PostgresStore, TaskClaimMany, TaskEnqueueReady,
    TaskInsertMany, TaskJournalWrite, TaskStore,
};

use crate::support;

const T0: i64 = 1_800_000_000_000;

/// What a server echoed: a value holding another (`abcd`), and one that
/// overlaps its end (`efgh-tail`).
const ECHO: &str = "abcd1234efgh-tail";

/// A Frontend with a secrets key over `store`, lambda `pay` with three
/// secrets, and a running task of it whose journal holds `answers`.
async fn journaled(store: Arc<dyn TaskStore>, answers: &[Vec<u8>]) -> (Frontend, String) {
    let keys = tempfile::TempDir::new().unwrap();
    let key = Arc::new(SecretKey::read_or_create(&keys.path().join("k")).unwrap());
    let frontend = Frontend::new(
        store.clone(),
        Arc::new(SystemClock),
        Arc::new(support::on_demand_runtime()),
        Arc::new(Wake::default()),
    )
    .secrets(key);
    support::store_lambda(&*store, "pay", LambdaConfig::default()).await;
    for (name, value) in [
        ("SHORT", "abcd"),
        ("TOKEN", "abcd1234efgh"),
        ("TAIL", "efgh-tail"),
    ] {
        frontend.secret_set("pay", name, value).await.unwrap();
    }
    let task = NewTask {
        lambda: "pay".into(),
        ..NewTask::default()
    };
    let inserted = store
        .task_insert_many(TaskInsertMany {
            tasks: vec![task],
            now: T0,
        })
        .await
        .unwrap();
    let id = inserted[0].id.clone();
    let report = store
        .task_enqueue_ready(TaskEnqueueReady {
            now: T0,
            limit: 10,
            enqueue_timeout: Duration::from_secs(60),
        })
        .await
        .unwrap();
    let claimed = store
        .task_claim_many(TaskClaimMany {
            claims: vec![(id.clone(), report.enqueued[0].enqueue_token)],
            now: T0,
            claim_timeout: Duration::from_secs(60),
        })
        .await
        .unwrap()
        .remove(0)
        .unwrap();
    // A few entries a write: one write carries at most 16 MiB.
    for (at, chunk) in answers.chunks(4).enumerate() {
        let from = u32::try_from(at * 4).unwrap();
        let entries = chunk
            .iter()
            .zip(from..)
            .map(|(answer, seq)| entry(seq, answer.clone()))
            .collect();
        store
            .task_journal_write(TaskJournalWrite {
                id: id.clone(),
                lease_token: claimed.lease_token,
                version: claimed.lambda_version,
                write: JournalWrite { from, entries },
                part: None,
                generation: None,
            })
            .await
            .unwrap()
            .unwrap();
    }
    (frontend, id)
}

fn entry(seq: u32, answer: Vec<u8>) -> JournalEntry {
    JournalEntry {
        seq,
        call: "wasi:http/outgoing-handler.handle".into(),
        digest: vec![7; 32],
        answer,
        summary: format!("POST https://pay.example/charge → 200 #{seq}"),
        outside: true,
        attempt: 1,
        at: T0 + i64::from(seq),
        took_us: 10,
    }
}

/// An answer of about `size` bytes with the echo at both of its edges.
fn echoed(size: usize) -> Vec<u8> {
    let mut answer = ECHO.as_bytes().to_vec();
    answer.resize(size - ECHO.len(), b'.');
    answer.extend_from_slice(ECHO.as_bytes());
    answer
}

fn masked(answer: &[u8]) -> Vec<u8> {
    let stars = "*".repeat(ECHO.len());
    let mut out = answer.to_vec();
    out[..ECHO.len()].copy_from_slice(stars.as_bytes());
    let end = out.len() - ECHO.len();
    out[end..].copy_from_slice(stars.as_bytes());
    out
}

/// Twelve answers of 1 MiB: several pages, whose first and last entries
/// hold the echo at their edges.
async fn every_page_is_masked(store: Arc<dyn TaskStore>) {
    let answers: Vec<Vec<u8>> = (0..12).map(|_| echoed(1 << 20)).collect();
    let (frontend, id) = journaled(store, &answers).await;
    let whole = frontend.task_journal(&id, true).await.unwrap();
    assert_eq!(whole.len(), answers.len());
    for (seq, (got, sent)) in whole.iter().zip(&answers).enumerate() {
        assert_eq!(got.seq as usize, seq);
        let shown = String::from_utf8_lossy(&got.answer[..40]);
        assert!(got.answer == masked(sent), "entry {seq} begins {shown:?}");
    }
    // Read page by page, as a client over gRPC does: each at most 4 MiB.
    let mut from = Some(0);
    let mut pages = Vec::new();
    while let Some(at) = from {
        let query = JournalQuery {
            id: id.clone(),
            answers: true,
            from: at,
            limit: 0,
        };
        let page = frontend.task_journal_page(query).await.unwrap();
        let bytes: usize = page.entries.iter().map(JournalEntry::wire_size).sum();
        assert!(bytes <= 4 << 20, "a page from {at} of {bytes} bytes");
        pages.push(page.entries.len());
        from = page.next;
    }
    assert_eq!(pages.iter().sum::<usize>(), answers.len(), "{pages:?}");
    assert!(pages.len() >= 3, "{pages:?}");
}

#[tokio::test]
async fn every_page_is_masked_on_sqlite() {
    let dir = tempfile::TempDir::new().unwrap();
    every_page_is_masked(support::sqlite_store(&dir).await).await;
}

#[tokio::test]
async fn every_page_is_masked_on_postgres() {
    let Some(server) = waft_testing::postgres() else {
        return;
    };
    let store = PostgresStore::connect(&server.fresh_database().await, 4)
        .await
        .unwrap();
    every_page_is_masked(Arc::new(store)).await;
}
