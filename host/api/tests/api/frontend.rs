//! The Frontend's gRPC adapter over a real Frontend on SQLite: called as
//! the authentication layer leaves a call (with the caller's principal in
//! its extensions), and through a real server with auth on, where tokens
//! are turned into principals as in production. The second is how the
//! rules on a task's parent are checked: a running task's child slots
//! belong to its execution alone.

use std::collections::BTreeSet;
use std::sync::Arc;

use tokio::net::TcpListener;
use tonic::{Code, Request, Status};
use waft_api::proto::frontend_client::FrontendClient;
use waft_api::proto::{self, frontend_server::Frontend as _};
use waft_api::{ChannelOptions, FrontendService, Roles, WaftChannel};
use waft_core::LambdaConfig;
use waft_runtime::{Allocator, Runtime, RuntimeConfig};
use waft_services::auth::{Authenticator, Principal};
use waft_services::{AdminApi, Clock, Frontend, SystemClock, Wake};
use waft_store::{
    LambdaDeploy, NewTask, SqliteStore, TaskClaimMany, TaskEnqueueReady, TaskInsertMany, TaskStore,
    TokenRole,
};

const T0: i64 = 1_800_000_000_000;

/// A Frontend on a fresh in-memory store, and the store.
async fn installation() -> (Arc<Frontend>, Arc<dyn TaskStore>) {
    let store: Arc<dyn TaskStore> =
        Arc::new(SqliteStore::connect("sqlite::memory:").await.unwrap());
    let runtime = Runtime::new(RuntimeConfig {
        allocator: Allocator::OnDemand,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let frontend = Frontend::new(
        store.clone(),
        Arc::new(SystemClock),
        Arc::new(runtime),
        Arc::new(Wake::default()),
    );
    (Arc::new(frontend), store)
}

/// The adapter over a Frontend on a fresh in-memory store, and the store.
async fn frontend() -> (FrontendService, Arc<dyn TaskStore>) {
    let (frontend, store) = installation().await;
    (FrontendService(frontend), store)
}

async fn deploy(store: &dyn TaskStore, name: &str) {
    store
        .lambda_deploy(LambdaDeploy {
            name: name.into(),
            digest: format!("digest-of-{name}"),
            component: name.as_bytes().to_vec(),
            artifact: None,
            config: LambdaConfig::default(),
            now: T0,
        })
        .await
        .unwrap();
}

/// One page of the tasks `who` may read, after `after`.
async fn page(
    service: &FrontendService,
    who: &Principal,
    after: Option<String>,
    limit: u32,
) -> Vec<proto::Task> {
    let mut request = Request::new(proto::ListTasksRequest {
        after,
        limit,
        ..Default::default()
    });
    request.extensions_mut().insert(who.clone());
    service
        .list_tasks(request)
        .await
        .unwrap()
        .into_inner()
        .tasks
}

/// A token scoped to some lambdas gets full pages of their tasks, however
/// many of other lambdas' lie between, and pages through every one.
#[tokio::test]
async fn a_scoped_token_pages_through_its_tasks_in_full_pages() {
    let (service, store) = frontend().await;
    deploy(&*store, "mail").await;
    deploy(&*store, "billing").await;
    // Three billing tasks for every mail task, each created a millisecond
    // after the last, so that ids follow the order of creation.
    let mut mail = Vec::new();
    for i in 0..48 {
        let lambda = if i % 4 == 3 { "mail" } else { "billing" };
        let inserted = store
            .task_insert_many(TaskInsertMany {
                tasks: vec![NewTask {
                    lambda: lambda.into(),
                    ..NewTask::default()
                }],
                now: T0 + i,
            })
            .await
            .unwrap();
        if lambda == "mail" {
            mail.push(inserted[0].id.clone());
        }
    }

    let who = Principal::Scheduler(BTreeSet::from(["mail".to_owned()]));
    let limit = 5;
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let tasks = page(&service, &who, after.clone(), limit).await;
        assert!(tasks.iter().all(|t| t.lambda == "mail"), "{tasks:?}");
        seen.extend(tasks.iter().map(|t| t.id.clone()));
        // A short page is the last, as a client pages.
        if tasks.len() < limit as usize {
            break;
        }
        after = tasks.last().map(|t| t.id.clone());
    }
    assert_eq!(seen, mail, "pages of {limit} from a token for mail");

    // A token for no lambda sees nothing.
    let nobody = Principal::Owner(BTreeSet::new());
    assert!(page(&service, &nobody, None, limit).await.is_empty());
}

/// The installation's own token in the served tests.
const CLUSTER: &str = "the-cluster-token-of-the-frontend-tests-0123456789";

/// A Frontend behind a real gRPC server with auth on, over a fresh store.
struct Served {
    address: String,
    frontend: Arc<Frontend>,
    store: Arc<dyn TaskStore>,
}

impl Served {
    async fn start() -> Self {
        let (frontend, store) = installation().await;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let auth = Authenticator::new(Some(store.clone()), Some(CLUSTER));
        let roles = Roles {
            frontend: Some(frontend.clone()),
            auth: Some(Arc::new(auth)),
            ..Roles::default()
        };
        // Bound already: calls queue on the listener until the server
        // takes them. It serves until the test's runtime ends.
        tokio::spawn(waft_api::serve(listener, roles, std::future::pending()));
        Self {
            address,
            frontend,
            store,
        }
    }

    /// A client presenting `token`.
    fn client(&self, token: &str) -> FrontendClient<WaftChannel> {
        let options = ChannelOptions {
            token: Some(token),
            ca: None,
        };
        FrontendClient::new(waft_api::channel_with(&self.address, options).unwrap())
    }

    /// The secret of a new token of `role` for `lambdas`.
    async fn token(&self, role: TokenRole, lambdas: &[&str]) -> String {
        let lambdas = lambdas.iter().map(|l| (*l).to_owned()).collect();
        self.frontend
            .token_create("test", role, lambdas)
            .await
            .unwrap()
            .1
    }

    /// A task of `lambda`, stored directly.
    async fn task(&self, lambda: &str, payload: &[u8]) -> String {
        let task = NewTask {
            lambda: lambda.into(),
            payload: payload.to_vec(),
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
        inserted[0].id.clone()
    }

    /// A task of `lambda` claimed as an executor claims one: running, and
    /// its lease token.
    async fn running(&self, lambda: &str) -> (String, i64) {
        let id = self.task(lambda, b"the parent").await;
        let now = SystemClock.now();
        let report = self
            .store
            .task_enqueue_ready(TaskEnqueueReady {
                now,
                limit: 100,
                enqueue_timeout: std::time::Duration::from_secs(60),
            })
            .await
            .unwrap();
        let queued = report.enqueued.iter().find(|t| t.id == id).unwrap();
        let claimed = self
            .store
            .task_claim_many(TaskClaimMany {
                claims: vec![(id.clone(), queued.enqueue_token)],
                now,
                claim_timeout: std::time::Duration::from_secs(60),
            })
            .await
            .unwrap()
            .remove(0)
            .unwrap();
        (id, claimed.lease_token)
    }

    /// The children of `parent`, as stored.
    async fn children(&self, parent: &str) -> Vec<waft_store::Task> {
        self.store
            .task_list(waft_store::TaskList {
                parent_id: Some(parent.to_owned()),
                ..Default::default()
            })
            .await
            .unwrap()
    }
}

/// A task of `lambda` under `parent`, with `lease` and `key` if given.
fn under(
    lambda: &str,
    parent: &str,
    lease: Option<i64>,
    key: Option<String>,
    payload: &[u8],
) -> proto::ScheduleRequest {
    proto::ScheduleRequest {
        task: Some(proto::NewTask {
            lambda: lambda.into(),
            payload: payload.to_vec(),
            parent_id: Some(parent.to_owned()),
            parent_lease: lease,
            idempotency_key: key,
            ..Default::default()
        }),
    }
}

/// The status code of a refusal; fails on an answer.
fn refusal<T: std::fmt::Debug>(answer: Result<T, Status>) -> Code {
    match answer {
        Ok(answer) => panic!("expected a refusal, got {answer:?}"),
        Err(status) => status.code(),
    }
}

/// A parent's lease is a claim counter (the attempt, usually), so anyone
/// could guess it: only the installation's own processes (the cluster
/// token, which executors call with) may schedule under one. A scoped
/// token is refused, and so is an admin's: nothing is created under the
/// running parent.
#[tokio::test]
async fn a_client_token_sending_a_parent_lease_is_refused() {
    let served = Served::start().await;
    deploy(&*served.store, "mail").await;
    let (parent, lease) = served.running("mail").await;
    let tokens = [
        served.token(TokenRole::Scheduler, &["mail"]).await,
        served.token(TokenRole::Owner, &["mail"]).await,
        served.token(TokenRole::Admin, &[]).await,
    ];
    for token in &tokens {
        for key in [Some(format!("child:{parent}:0")), None] {
            let request = under("mail", &parent, Some(lease), key, b"an attacker's");
            let answer = served.client(token).schedule(request).await;
            assert_eq!(refusal(answer), Code::PermissionDenied);
        }
    }
    assert!(served.children(&parent).await.is_empty());

    // Without a lease, a scoped token may still name a parent of its own
    // lambda, but never with a child's reserved key.
    let mut scheduler = served.client(&tokens[0]);
    let key = Some(format!("child:{parent}:0"));
    let reserved = scheduler
        .schedule(under("mail", &parent, None, key, b"mine"))
        .await;
    assert_eq!(refusal(reserved), Code::InvalidArgument);
    let own = scheduler
        .schedule(under("mail", &parent, None, None, b"mine"))
        .await
        .unwrap()
        .into_inner();
    assert!(own.created);
}

/// Naming a parent links a task into that parent's tree: the token must be
/// allowed to schedule tasks of the parent's lambda too.
#[tokio::test]
async fn a_scoped_token_naming_a_foreign_parent_is_refused() {
    let served = Served::start().await;
    deploy(&*served.store, "mail").await;
    deploy(&*served.store, "billing").await;
    let foreign = served.task("billing", b"billing's").await;
    let mail = served.token(TokenRole::Scheduler, &["mail"]).await;
    let answer = served
        .client(&mail)
        .schedule(under("mail", &foreign, None, None, b"mine"))
        .await;
    assert_eq!(refusal(answer), Code::PermissionDenied);
    assert!(served.children(&foreign).await.is_empty());
    let unknown = served
        .client(&mail)
        .schedule(under("mail", "01NOSUCHTASK", None, None, b"mine"))
        .await;
    assert_eq!(refusal(unknown), Code::InvalidArgument);

    // In a batch too, and a token for both lambdas may.
    let batch = proto::ScheduleBatchRequest {
        tasks: vec![under("mail", &foreign, None, None, b"mine").task.unwrap()],
    };
    let answer = served.client(&mail).schedule_batch(batch.clone()).await;
    assert_eq!(refusal(answer), Code::PermissionDenied);
    let both = served
        .token(TokenRole::Scheduler, &["mail", "billing"])
        .await;
    let answer = served.client(&both).schedule_batch(batch).await.unwrap();
    assert!(answer.into_inner().tasks[0].created);
}

/// A client that tries to take a running parent's next child slot leaves
/// it to the parent: its execution's child is created, with its payload.
#[tokio::test]
async fn a_running_parents_child_slot_stays_its_own() {
    let served = Served::start().await;
    deploy(&*served.store, "mail").await;
    let (parent, lease) = served.running("mail").await;
    let attacker = served.token(TokenRole::Scheduler, &["mail"]).await;
    let key = || Some(format!("child:{parent}:0"));
    let stolen = under("mail", &parent, Some(lease), key(), b"an attacker's");
    let _ = served.client(&attacker).schedule(stolen).await;

    // The execution schedules its first child, as an executor does.
    let own = under("mail", &parent, Some(lease), key(), b"the parent's");
    let answer = served
        .client(CLUSTER)
        .schedule(own)
        .await
        .unwrap()
        .into_inner();
    let child = served.store.task_get(&answer.id).await.unwrap().unwrap();
    let payload = String::from_utf8_lossy(&child.payload);
    assert_eq!((answer.created, &*payload), (true, "the parent's"));
}

/// `TaskHistory` over the store's minutes: a point per step up to now,
/// the lambdas a caller may read added together (percentiles from their
/// merged histograms), a lambda named only by its readers, and a range or
/// step that cannot be read refused with the reason.
#[tokio::test]
async fn task_history_reads_the_minutes_a_caller_may_see() {
    use waft_store::{
        DepthSample, HistoryAdd, HistoryDepth, LatencyHistogram, MINUTE, MinuteCounts, minute_of,
    };
    let (service, store) = frontend().await;
    deploy(&*store, "mail").await;
    deploy(&*store, "billing").await;
    let now = minute_of(SystemClock.now());
    let counts = |lambda: &str, minute, succeeded, failed, latency_ms: i64, n| {
        let mut latency = LatencyHistogram::default();
        for _ in 0..n {
            latency.record(latency_ms);
        }
        MinuteCounts {
            lambda: lambda.into(),
            minute,
            succeeded,
            failed,
            dead: 0,
            latency,
        }
    };
    store
        .history_add(HistoryAdd {
            minutes: vec![
                counts("mail", now, 10, 2, 4, 10),
                counts("mail", now - 5 * MINUTE, 1, 0, 4, 1),
                counts("billing", now, 0, 5, 5000, 90),
            ],
        })
        .await
        .unwrap();
    store
        .history_depth(HistoryDepth {
            samples: vec![DepthSample {
                lambda: "billing".into(),
                minute: now,
                depth: 7,
            }],
        })
        .await
        .unwrap();
    let ask = |who: Principal, lambda: &str, range_ms: u64, step_ms: u64| {
        let mut request = Request::new(proto::TaskHistoryRequest {
            lambda: lambda.into(),
            range_ms,
            step_ms,
        });
        request.extensions_mut().insert(who);
        let service = &service;
        async move { service.task_history(request).await.map(|r| r.into_inner()) }
    };

    let all = ask(Principal::Admin, "", 0, 0).await.unwrap();
    assert_eq!(all.step_ms, 60_000, "the last hour at one minute");
    assert_eq!(all.points.len(), 60);
    let last = all.points.last().unwrap();
    assert_eq!(last.at_ms, now, "the last point holds the current minute");
    assert_eq!((last.succeeded, last.failed, last.depth), (10, 7, Some(7)));
    // 10 mail latencies of 4 ms, 90 billing ones of 5 s: the merged p50 is
    // billing's, which averaging the lambdas' percentiles would hide.
    let p50 = last.latency_p50_ms.unwrap();
    assert!((4096.0..8192.0).contains(&p50), "p50 {p50}");
    assert_eq!(all.points.iter().map(|p| p.succeeded).sum::<u64>(), 11);
    assert_eq!(all.points[0].latency_p50_ms, None, "nothing started then");

    let day = ask(Principal::Admin, "", 86_400_000, 0).await.unwrap();
    assert_eq!((day.step_ms, day.points.len()), (15 * 60_000, 96));
    let last = day.points.last().unwrap();
    assert!(last.at_ms <= now && now < last.at_ms + 15 * 60_000);
    assert_eq!(day.points.iter().map(|p| p.failed).sum::<u64>(), 7);

    let mail_owner = Principal::Owner(BTreeSet::from(["mail".to_owned()]));
    let mine = ask(mail_owner.clone(), "", 0, 0).await.unwrap();
    let last = mine.points.last().unwrap();
    assert_eq!((last.succeeded, last.failed, last.depth), (10, 2, None));
    let named = ask(mail_owner.clone(), "mail", 0, 5 * 60_000)
        .await
        .unwrap();
    assert_eq!(named.points.len(), 12);
    let refused = ask(mail_owner, "billing", 0, 0).await.unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied);

    for (range_ms, step_ms, words) in [
        (90_000, 0, "whole number of minutes"),
        (3_600_000, 1_000, "step of 1 s"),
        (3_600_000 * 24 * 40, 0, "31 days"),
    ] {
        let refused = ask(Principal::Admin, "", range_ms, step_ms)
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
        assert!(refused.message().contains(words), "{}", refused.message());
    }
}
