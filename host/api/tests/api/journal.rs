//! Durable lambdas' journals over the wire: the HSC's `WriteJournal` and
//! `ReadJournal`, a result's journal tail and `replayed`, the Frontend's
//! `GetJournal` and a redrive's `fresh`, through a real server with auth
//! on, over a real Frontend and HSC on SQLite. Every value a Rust string or
//! a byte string holds comes back as it went; refusals and status codes
//! are the precise ones.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tonic::Code;
use waft_api::proto::frontend_client::FrontendClient as RawFrontend;
use waft_api::proto::hsc_client::HscClient as RawHsc;
use waft_api::{ChannelOptions, FrontendClient, HscClient, Roles, WaftChannel, proto};
use waft_core::{LambdaConfig, TaskStatus};
use waft_runtime::{Allocator, Runtime, RuntimeConfig};
use waft_services::auth::Authenticator;
use waft_services::{
    AdminApi, ClientApi, Clock, Frontend, HeartbeatConfig, Hsc, HscApi, JournalCommit, JournalPage,
    ServiceError, SystemClock, Wake,
};
use waft_store::{
    DeadSelector, JournalEntry, JournalPart, JournalWrite, LambdaDeploy, NewTask, Refusal,
    ResultOutcome, SqliteStore, TaskClaimMany, TaskEnqueueReady, TaskInsertMany, TaskResult,
    TaskStore, TokenRole,
};

/// The installation's own token.
const CLUSTER: &str = "the-cluster-token-of-the-journal-tests-0123456789";

/// A Frontend and an HSC behind one real gRPC server with auth on.
struct Served {
    address: String,
    frontend: Arc<Frontend>,
    store: Arc<dyn TaskStore>,
}

impl Served {
    async fn start() -> Self {
        let store: Arc<dyn TaskStore> =
            Arc::new(SqliteStore::connect("sqlite::memory:").await.unwrap());
        let runtime = Runtime::new(RuntimeConfig {
            allocator: Allocator::OnDemand,
            ..RuntimeConfig::default()
        })
        .unwrap();
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let frontend = Arc::new(Frontend::new(
            store.clone(),
            clock.clone(),
            Arc::new(runtime),
            Arc::new(Wake::default()),
        ));
        let hsc: Arc<dyn HscApi> =
            Arc::new(Hsc::new(store.clone(), clock, HeartbeatConfig::default()));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let roles = Roles {
            frontend: Some(frontend.clone()),
            hsc: Some(hsc),
            auth: Some(Arc::new(Authenticator::new(
                Some(store.clone()),
                Some(CLUSTER),
            ))),
            ..Roles::default()
        };
        tokio::spawn(waft_api::serve(listener, roles, std::future::pending()));
        let served = Self {
            address,
            frontend,
            store,
        };
        served.deploy("pay", 5).await;
        served
    }

    fn channel(&self, token: &str) -> WaftChannel {
        let options = ChannelOptions {
            token: Some(token),
            ca: None,
        };
        waft_api::channel_with(&self.address, options).unwrap()
    }

    fn hsc(&self) -> HscClient {
        HscClient::new(self.channel(CLUSTER))
    }

    fn frontend(&self, token: &str) -> FrontendClient {
        FrontendClient::new(self.channel(token))
    }

    async fn deploy(&self, name: &str, max_attempts: u32) {
        let deploy = LambdaDeploy {
            name: name.into(),
            digest: format!("digest-of-{name}"),
            component: name.as_bytes().to_vec(),
            artifact: None,
            config: LambdaConfig {
                max_attempts,
                ..LambdaConfig::default()
            },
            now: SystemClock.now(),
        };
        self.store.lambda_deploy(deploy).await.unwrap();
    }

    /// A new task of `lambda`, claimed as an executor claims one.
    async fn running(&self, lambda: &str) -> Claimed {
        let task = NewTask {
            lambda: lambda.into(),
            ..NewTask::default()
        };
        let now = SystemClock.now();
        let inserted = self
            .store
            .task_insert_many(TaskInsertMany {
                tasks: vec![task],
                now,
            })
            .await
            .unwrap();
        self.claim(&inserted[0].id).await
    }

    /// Claims task `id`, due now.
    async fn claim(&self, id: &str) -> Claimed {
        let now = SystemClock.now();
        let report = self
            .store
            .task_enqueue_ready(TaskEnqueueReady {
                now,
                limit: 100,
                enqueue_timeout: Duration::from_secs(60),
            })
            .await
            .unwrap();
        let queued = report.enqueued.iter().find(|t| t.id == id).unwrap();
        let claimed = self
            .store
            .task_claim_many(TaskClaimMany {
                claims: vec![(id.to_owned(), queued.enqueue_token)],
                now,
                claim_timeout: Duration::from_secs(60),
            })
            .await
            .unwrap()
            .remove(0)
            .unwrap();
        Claimed {
            id: id.to_owned(),
            lease: claimed.lease_token,
            version: claimed.lambda_version,
            journal_len: claimed.journal_len,
        }
    }
}

struct Claimed {
    id: String,
    lease: i64,
    version: u32,
    journal_len: u32,
}

/// An entry whose strings hold NUL, control and multi-byte characters, and
/// whose bytes hold every byte.
fn entry(seq: u32, attempt: u32) -> JournalEntry {
    JournalEntry {
        seq,
        call: "wasi:http/outgoing-handler.handle".into(),
        digest: (0..=255).collect(),
        answer: (0..=255).rev().chain([0, 0, 0]).collect(),
        summary: format!("POST https://pay.example/charge \0 → 201 é 𝄞 \u{1b}[0m #{seq}"),
        outside: seq.is_multiple_of(2),
        attempt,
        at: 1_800_000_000_000 + i64::from(seq),
        took_us: 1_000 + u64::from(seq),
    }
}

fn commit(task: &Claimed, from: u32, entries: Vec<JournalEntry>) -> JournalCommit {
    JournalCommit {
        id: task.id.clone(),
        lease_token: task.lease,
        version: task.version,
        write: JournalWrite { from, entries },
        part: None,
        generation: None,
    }
}

fn page(task: &Claimed, from: u32, limit: u32) -> JournalPage {
    JournalPage {
        id: task.id.clone(),
        lease_token: task.lease,
        from,
        limit,
    }
}

fn without_answers(entries: &[JournalEntry]) -> Vec<JournalEntry> {
    entries
        .iter()
        .map(|entry| JournalEntry {
            answer: Vec::new(),
            ..entry.clone()
        })
        .collect()
}

#[tokio::test]
async fn a_journal_round_trips_every_byte_under_its_lease() {
    let served = Served::start().await;
    let hsc = served.hsc();
    let task = served.running("pay").await;
    let entries: Vec<JournalEntry> = (0..3).map(|seq| entry(seq, 1)).collect();
    hsc.task_journal_write(commit(&task, 0, entries[..2].to_vec()))
        .await
        .unwrap()
        .unwrap();
    hsc.task_journal_write(commit(&task, 2, entries[2..].to_vec()))
        .await
        .unwrap()
        .unwrap();
    // Paged as asked, and whole.
    let first = hsc.task_journal_read(page(&task, 0, 2)).await.unwrap();
    assert_eq!(first.unwrap(), entries[..2]);
    let rest = hsc.task_journal_read(page(&task, 2, 100)).await.unwrap();
    assert_eq!(rest.unwrap(), entries[2..]);
    let past = hsc.task_journal_read(page(&task, 3, 100)).await.unwrap();
    assert_eq!(past.unwrap(), []);

    // A person's view has no answers, for an admin and for an owner.
    let admin = served.frontend.token_create("a", TokenRole::Admin, vec![]);
    let admin = admin.await.unwrap().1;
    let owner = served
        .frontend
        .token_create("o", TokenRole::Owner, vec!["pay".into()]);
    let owner = owner.await.unwrap().1;
    for token in [&admin, &owner] {
        let shown = served
            .frontend(token)
            .task_journal(&task.id, false)
            .await
            .unwrap();
        assert_eq!(shown, without_answers(&entries));
        // Asked for (a local replay), by the same right: every byte.
        let whole = served
            .frontend(token)
            .task_journal(&task.id, true)
            .await
            .unwrap();
        assert_eq!(whole, entries);
    }
    // On the wire, too: the answer field is empty unless asked for (an
    // older client does not know to ask).
    let mut raw = RawFrontend::new(served.channel(&admin));
    let request = proto::GetJournalRequest {
        id: task.id.clone(),
        answers: false,
        ..Default::default()
    };
    let wire = raw.get_journal(request).await.unwrap().into_inner();
    assert_eq!(wire.entries.len(), 3);
    assert!(wire.entries.iter().all(|e| e.answer.is_empty()));
}

#[tokio::test]
async fn a_stale_lease_neither_writes_nor_reads() {
    let served = Served::start().await;
    let hsc = served.hsc();
    let task = served.running("pay").await;
    hsc.task_journal_write(commit(&task, 0, vec![entry(0, 1)]))
        .await
        .unwrap()
        .unwrap();
    let current_lease = task.lease;
    let stale = Claimed {
        lease: task.lease - 1,
        id: task.id.clone(),
        ..task
    };
    let write = hsc.task_journal_write(commit(&stale, 1, vec![entry(1, 1)]));
    assert!(matches!(
        write.await.unwrap(),
        Err(Refusal::StaleLease { current }) if current == current_lease
    ));
    let read = hsc.task_journal_read(page(&stale, 0, 10)).await.unwrap();
    assert!(matches!(read, Err(Refusal::StaleLease { .. })), "{read:?}");
    let unknown = JournalPage {
        id: "01NOSUCHTASK0000000000000".into(),
        ..page(&stale, 0, 10)
    };
    let read = hsc.task_journal_read(unknown).await.unwrap();
    assert_eq!(read, Err(Refusal::NotFound));
    // Nothing the stale lease sent was kept.
    let kept = served
        .frontend(CLUSTER)
        .task_journal(&stale.id, false)
        .await;
    assert_eq!(kept.unwrap().len(), 1);
}

#[tokio::test]
async fn bad_requests_get_precise_codes() {
    let served = Served::start().await;
    let task = served.running("pay").await;
    // Entries not numbered from the write's `from`.
    let mut raw = RawHsc::new(served.channel(CLUSTER));
    let misnumbered = proto::WriteJournalRequest {
        task_id: task.id.clone(),
        lease_token: task.lease,
        version: task.version,
        write: Some(waft_client::convert::journal_write_to_proto(JournalWrite {
            from: 0,
            entries: vec![entry(1, 1)],
        })),
        part: None,
        generation: None,
    };
    let status = raw.write_journal(misnumbered).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("journal"), "{status:?}");
    // No write at all.
    let empty = proto::WriteJournalRequest {
        task_id: task.id.clone(),
        lease_token: task.lease,
        ..Default::default()
    };
    let status = raw.write_journal(empty).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    // The same refusal through a result's journal.
    let result = TaskResult {
        id: task.id.clone(),
        lease_token: task.lease,
        outcome: ResultOutcome::Success { output: None },
        log: None,
        journal: Some(JournalWrite {
            from: 3,
            entries: vec![entry(0, 1)],
        }),
        replayed: 0,
    };
    let error = served.hsc().task_set_result_many(vec![result]).await;
    assert!(
        matches!(&error, Err(ServiceError::InvalidArgument(_))),
        "{error:?}"
    );
    // A person asking for an unknown task's journal.
    let unknown = served
        .frontend(CLUSTER)
        .task_journal("01NOSUCHTASK0000000000000", false)
        .await;
    assert!(
        matches!(&unknown, Err(ServiceError::NotFound(_))),
        "{unknown:?}"
    );
    let mut raw = RawFrontend::new(served.channel(CLUSTER));
    let request = proto::GetJournalRequest {
        id: "01NOSUCHTASK0000000000000".into(),
        answers: true,
        ..Default::default()
    };
    let status = raw.get_journal(request).await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
}

/// A result writes its journal's tail and how many entries it replayed;
/// the attempts say so, and the next claim counts the journal.
#[tokio::test]
async fn a_result_carries_its_journal_and_what_it_replayed() {
    let served = Served::start().await;
    let hsc = served.hsc();
    let task = served.running("pay").await;
    hsc.task_journal_write(commit(&task, 0, vec![entry(0, 1)]))
        .await
        .unwrap()
        .unwrap();
    let result = TaskResult {
        id: task.id.clone(),
        lease_token: task.lease,
        outcome: ResultOutcome::Retriable {
            error: "crashed after the charge".into(),
            retry_after: Some(Duration::ZERO),
        },
        log: None,
        journal: Some(JournalWrite {
            from: 1,
            entries: vec![entry(1, 1), entry(2, 1)],
        }),
        replayed: 0,
    };
    let answers = hsc.task_set_result_many(vec![result]).await.unwrap();
    assert_eq!(answers, [Ok(TaskStatus::RetriableFailure)]);

    let second = served.claim(&task.id).await;
    assert_eq!(second.journal_len, 3);
    let replay = hsc.task_journal_read(page(&second, 0, 100)).await.unwrap();
    assert_eq!(replay.unwrap(), [entry(0, 1), entry(1, 1), entry(2, 1)]);
    let result = TaskResult {
        id: second.id.clone(),
        lease_token: second.lease,
        outcome: ResultOutcome::Success { output: None },
        log: None,
        journal: Some(JournalWrite {
            from: 3,
            entries: vec![entry(3, 2)],
        }),
        replayed: 3,
    };
    let answers = hsc.task_set_result_many(vec![result]).await.unwrap();
    assert_eq!(answers, [Ok(TaskStatus::Success)]);

    let frontend = served.frontend(CLUSTER);
    let attempts = frontend.task_attempts(&task.id).await.unwrap();
    let replayed: Vec<u32> = attempts.iter().map(|a| a.replayed).collect();
    assert_eq!(replayed, [0, 3]);
    let journal = frontend.task_journal(&task.id, false).await.unwrap();
    let attempts: Vec<u32> = journal.iter().map(|e| e.attempt).collect();
    assert_eq!(attempts, [1, 1, 1, 2]);
}

/// A dead task's journal survives a plain redrive and goes with `fresh`.
#[tokio::test]
async fn a_fresh_redrive_discards_the_journal() {
    let served = Served::start().await;
    served.deploy("once", 1).await;
    let hsc = served.hsc();
    let frontend = served.frontend(CLUSTER);
    let dead = async |served: &Served| {
        let task = served.running("once").await;
        hsc.task_journal_write(commit(&task, 0, vec![entry(0, 1)]))
            .await
            .unwrap()
            .unwrap();
        let result = TaskResult {
            id: task.id.clone(),
            lease_token: task.lease,
            outcome: ResultOutcome::Retriable {
                error: "down".into(),
                retry_after: None,
            },
            log: None,
            journal: None,
            replayed: 0,
        };
        let answers = hsc.task_set_result_many(vec![result]).await.unwrap();
        assert_eq!(answers, [Ok(TaskStatus::Dead)]);
        task.id
    };
    let kept = dead(&served).await;
    let ids = DeadSelector::Ids(vec![kept.clone()]);
    assert_eq!(frontend.dead_redrive(ids, None, false).await.unwrap(), 1);
    assert_eq!(frontend.task_journal(&kept, false).await.unwrap().len(), 1);
    assert_eq!(served.claim(&kept).await.journal_len, 1);

    let discarded = dead(&served).await;
    let ids = DeadSelector::Ids(vec![discarded.clone()]);
    assert_eq!(frontend.dead_redrive(ids, None, true).await.unwrap(), 1);
    assert_eq!(frontend.task_journal(&discarded, false).await.unwrap(), []);
    assert_eq!(served.claim(&discarded).await.journal_len, 0);
}

/// A copy of an earlier write that arrives late (a retried call whose
/// first copy was held up in another HSC) is refused as a failed
/// precondition, and deletes nothing written since; a copy of the write
/// taken last is answered as written.
#[tokio::test]
async fn a_late_journal_write_is_a_failed_precondition() {
    let served = Served::start().await;
    let hsc = served.hsc();
    let task = served.running("pay").await;
    let in_turn = |after, from, entries| JournalCommit {
        part: Some(JournalPart {
            after,
            start: from,
            more: false,
        }),
        ..commit(&task, from, entries)
    };
    let first = in_turn(0, 0, vec![entry(0, 1), entry(1, 1)]);
    let second = in_turn(1, 2, vec![entry(2, 1)]);
    hsc.task_journal_write(first.clone())
        .await
        .unwrap()
        .unwrap();
    hsc.task_journal_write(second.clone())
        .await
        .unwrap()
        .unwrap();
    let late = hsc.task_journal_write(first.clone()).await;
    assert!(
        matches!(&late, Err(ServiceError::FailedPrecondition(m)) if m.contains("late copy")),
        "{late:?}"
    );
    let mut raw = RawHsc::new(served.channel(CLUSTER));
    let request = proto::WriteJournalRequest {
        task_id: task.id.clone(),
        lease_token: task.lease,
        version: task.version,
        write: Some(waft_client::convert::journal_write_to_proto(first.write)),
        part: Some(proto::JournalPart {
            after: 0,
            start: 0,
            more: false,
        }),
        generation: None,
    };
    let status = raw.write_journal(request).await.unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    let again = hsc.task_journal_write(second).await.unwrap();
    assert_eq!(again, Ok(()));
    let kept = hsc.task_journal_read(page(&task, 0, 100)).await.unwrap();
    assert_eq!(kept.unwrap(), [entry(0, 1), entry(1, 1), entry(2, 1)]);
}

/// With answers, a journal holds up to 64 MiB: `GetJournal` answers it a
/// page of at most 4 MiB at a time (one entry whatever its size), each
/// naming where the next starts, and the client reads every page.
#[tokio::test]
async fn get_journal_answers_a_bounded_page_at_a_time() {
    let served = Served::start().await;
    let hsc = served.hsc();
    let task = served.running("pay").await;
    let entries: Vec<JournalEntry> = (0..24)
        .map(|seq| JournalEntry {
            answer: vec![seq as u8; 1 << 20],
            ..entry(seq, 1)
        })
        .collect();
    for from in (0..24).step_by(8) {
        let write = entries[from..from + 8].to_vec();
        let from = u32::try_from(from).unwrap();
        hsc.task_journal_write(commit(&task, from, write))
            .await
            .unwrap()
            .unwrap();
    }
    let admin = served.frontend.token_create("a", TokenRole::Admin, vec![]);
    let admin = admin.await.unwrap().1;
    let mut raw = RawFrontend::new(served.channel(&admin));
    let mut read = Vec::new();
    let mut pages = 0;
    let mut from = Some(0);
    while let Some(at) = from {
        let request = proto::GetJournalRequest {
            id: task.id.clone(),
            answers: true,
            from: at,
            ..Default::default()
        };
        let page = raw.get_journal(request).await.unwrap().into_inner();
        let size: usize = page
            .entries
            .iter()
            .map(|e| e.answer.len() + e.summary.len() + e.call.len() + e.digest.len())
            .sum();
        assert!(size <= 5 << 20, "page {pages} from {at} is {size} bytes");
        assert!(
            !page.entries.is_empty() || at == 24,
            "an empty page from {at}"
        );
        pages += 1;
        from = page.next;
        let page = page.entries.into_iter();
        read.extend(page.map(waft_client::convert::journal_entry_from_proto));
    }
    assert!(pages > 4, "{pages} pages");
    assert!(read == entries, "the pages do not add up to the journal");
    // The client pages by itself.
    let whole = served.frontend(&admin).task_journal(&task.id, true).await;
    assert!(whole.unwrap() == entries);
    // A page asked for by count, and one past the end.
    let request = proto::GetJournalRequest {
        id: task.id.clone(),
        answers: false,
        from: 5,
        limit: 2,
    };
    let page = raw.get_journal(request).await.unwrap().into_inner();
    let seqs: Vec<u32> = page.entries.iter().map(|e| e.seq).collect();
    assert_eq!((seqs, page.next), (vec![5, 6], Some(7)));
    let request = proto::GetJournalRequest {
        id: task.id.clone(),
        answers: true,
        from: 24,
        limit: 0,
    };
    let page = raw.get_journal(request).await.unwrap().into_inner();
    assert_eq!((page.entries.len(), page.next), (0, None));
}
