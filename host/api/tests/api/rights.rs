//! Every call of the Frontend's roles against every kind of caller, made
//! twice: in process, by the Frontend acting for the caller, and over gRPC
//! through a real server with auth on, presenting the caller's token. Both
//! must give the verdict the table below says, and the same answer, so the
//! two ways in cannot disagree.
//!
//! The table is written by hand, apart from `waft_core::access`'s: it says
//! what each kind of token may do as a reader of the docs expects, and the
//! rule must agree with it. A new method of a role's trait cannot go
//! untested: `Probe` (`rights/probe.rs`) implements every trait and names
//! the [`Call`] of each method, [`invoke`] and [`expected`] match on every
//! `Call`, and a test checks that invoking each call reaches its method.

mod probe;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::net::TcpListener;
use waft_api::{ChannelOptions, FrontendClient, Roles};
use waft_core::LambdaConfig;
use waft_core::access::{Call, Principal};
use waft_runtime::{Allocator, Runtime, RuntimeConfig};
use waft_services::api::{AdminApi, ClientApi, ClusterApi, JournalQuery, JournalSlice};
use waft_services::auth::Authenticator;
use waft_services::{
    CronRequest, Frontend, FrontendApi, HistoryAnswer, HistoryQuery, ServiceError, ServiceResult,
    SystemClock, TaskRequest, Wake,
};
use waft_store::{
    Artifact, Attempt, Backlog, Cron, DeadSelector, Gate, GateState, Lambda, LambdaDeploy, Millis,
    Overview, QueueFills, SealedSecrets, SecretInfo, SignalSent, SqliteStore, StatusCount, Task,
    TaskCount, TaskInserted, TaskList, TaskStore, Token, TokenRole,
};

const T0: i64 = 1_800_000_000_000;

/// The installation's own token.
const CLUSTER: &str = "the-cluster-token-of-the-rights-tests-0123456789";

/// The kinds of caller, in the order of the table's columns.
const KINDS: [&str; 6] = [
    "admin",
    "owner of mail",
    "owner of billing",
    "scheduler of mail",
    "scheduler of billing",
    "cluster",
];

/// What each kind of caller may do with `call` on lambda `mail`'s things,
/// one letter a column of [`KINDS`]: `y` allowed, `n` refused
/// (`PermissionDenied`); for a list, `s` answered with mail's rows, `h`
/// answered without them.
fn expected(call: Call) -> &'static str {
    match call {
        Call::TaskSchedule => "yynyny",
        Call::TaskGet => "yynyny",
        Call::TaskList => "sshshs",
        Call::TaskCount => "yynyny",
        Call::TaskCancel => "yynnny",
        Call::TaskSignal => "yynyny",
        Call::TaskAttempts => "yynyny",
        Call::TaskJournal => "yynyny",
        Call::TaskJournalAnswers => "yynnny",
        Call::LambdaStats => "sshshs",
        // Named: the lambda's readers only.
        Call::TaskHistory => "yynyny",
        Call::LambdaDeploy => "yynnny",
        Call::LambdaCheck => "yynnny",
        Call::LambdaMove => "yynnny",
        Call::LambdaGet => "yynyny",
        Call::LambdaList => "sshshs",
        Call::LambdaRollback => "yynnny",
        Call::LambdaDelete => "yynnny",
        Call::LambdaVersions => "yynyny",
        Call::GateSet => "yynnny",
        Call::GateList => "sshshs",
        Call::DeadRedrive => "yynnny",
        Call::DeadPurge => "yynnny",
        Call::CronCreate => "yynnny",
        Call::CronList => "sshshs",
        Call::CronPreview => "yyyyyy",
        Call::CronDelete => "yynnny",
        Call::TokenCreate => "ynnnny",
        Call::TokenList => "ynnnny",
        Call::TokenRevoke => "ynnnny",
        Call::SecretSet => "yynnny",
        Call::SecretList => "yynyny",
        Call::SecretRemove => "yynnny",
        Call::ComponentGet => "ynnnny",
        Call::ArtifactGet => "ynnnny",
        Call::LambdaChanged => "ynnnny",
        Call::QueueFilled => "ynnnny",
        Call::QueueBacklog => "ynnnny",
        Call::SecretSealed => "ynnnny",
    }
}

/// What a call answered, as far as rights go: for a list, whether it held
/// any of mail's rows.
type Answer = ServiceResult<Option<bool>>;

/// The answer of a call that is no list.
fn none<T>(_: T) -> Option<bool> {
    None
}

/// Whether `rows` hold one of lambda mail.
fn holds_mail<T>(rows: &[T], lambda: impl Fn(&T) -> &str) -> Option<bool> {
    Some(rows.iter().any(|row| lambda(row) == "mail"))
}

/// Makes `call` on `api`, about lambda `mail` and its things in `fx`; what
/// a call changes for good (a cron, a token) it first makes anew through
/// `fx.cluster`, so that every caller finds the same.
async fn invoke(api: &dyn FrontendApi, fx: &Fixture, call: Call) -> Answer {
    let task = fx.task.as_str();
    match call {
        Call::TaskSchedule => api.task_schedule_many(vec![mail_task()]).await.map(none),
        Call::TaskGet => api.task_get(task).await.map(none),
        Call::TaskList => (api.task_list(TaskList::default()).await)
            .map(|tasks| holds_mail(&tasks, |t| &t.lambda)),
        Call::TaskCount => api.task_count(mail_count()).await.map(none),
        Call::TaskCancel => api.task_cancel(&fx.fresh_task().await).await.map(none),
        Call::TaskSignal => (api.task_signal(task, "approved", b"{}".to_vec()).await).map(none),
        Call::TaskAttempts => api.task_attempts(task).await.map(none),
        Call::TaskJournal => api.task_journal(task, false).await.map(none),
        Call::TaskJournalAnswers => api.task_journal(task, true).await.map(none),
        Call::LambdaStats => (api.lambda_stats(Duration::from_secs(60)).await)
            .map(|overview| holds_mail(&overview.lambdas, |s| &s.lambda)),
        Call::TaskHistory => (api.task_history(HistoryQuery {
            lambda: Some("mail".into()),
            range: Duration::from_secs(3600),
            step: None,
        }))
        .await
        .map(none),
        Call::LambdaDeploy => (api
            .lambda_deploy("mail", b"not wasm".to_vec(), config())
            .await)
            .map(none),
        Call::LambdaCheck => (api
            .lambda_check("mail", b"not wasm".to_vec(), config(), &|_| {})
            .await)
            .map(none),
        Call::LambdaMove => api.lambda_move("mail", None, &|_| {}).await.map(none),
        Call::LambdaGet => api.lambda_get("mail", None).await.map(none),
        Call::LambdaList => (api.lambda_list().await).map(|l| holds_mail(&l, |l| &l.name)),
        Call::LambdaRollback => api.lambda_rollback("mail", Some(1)).await.map(none),
        // Refused while mail has tasks (it always has): nothing is deleted.
        Call::LambdaDelete => api.lambda_delete("mail", false).await.map(none),
        Call::LambdaVersions => api.lambda_versions("mail").await.map(none),
        Call::GateSet => (api.gate_set("mail", Some("spare"), GateState::Open).await).map(none),
        Call::GateList => (api.gate_list().await).map(|g| holds_mail(&g, |g| &g.lambda)),
        Call::DeadRedrive => api.dead_redrive(mail_dead(), None, false).await.map(none),
        Call::DeadPurge => api.dead_purge(mail_dead()).await.map(none),
        Call::CronCreate => api.cron_create(mail_cron()).await.map(none),
        Call::CronList => (api.cron_list().await).map(|c| holds_mail(&c, |c| &c.lambda)),
        Call::CronPreview => api.cron_preview("0 * * * *", None, 3).await.map(none),
        Call::CronDelete => api.cron_delete(&fx.fresh_cron().await).await.map(none),
        Call::TokenCreate => (api.token_create("new", TokenRole::Owner, vec![]).await).map(none),
        Call::TokenList => api.token_list().await.map(none),
        Call::TokenRevoke => api.token_revoke(&fx.fresh_token().await).await.map(none),
        Call::SecretSet => api.secret_set("mail", "KEY", "value").await.map(none),
        Call::SecretList => api.secret_list("mail").await.map(none),
        Call::SecretRemove => api.secret_remove("mail", "KEY").await.map(none),
        Call::ComponentGet => api.component_get("digest-of-mail").await.map(none),
        Call::ArtifactGet => api.artifact_get("digest-of-mail", "engine").await.map(none),
        Call::LambdaChanged => api.lambda_changed(0, Duration::ZERO).await.map(none),
        Call::QueueFilled => api.queue_filled(0, Duration::ZERO).await.map(none),
        Call::QueueBacklog => api.queue_backlog().await.map(none),
        Call::SecretSealed => api.secret_sealed("mail").await.map(none),
    }
}

fn mail_task() -> TaskRequest {
    TaskRequest {
        lambda: "mail".into(),
        ..TaskRequest::default()
    }
}

fn mail_count() -> TaskCount {
    TaskCount {
        lambda: "mail".into(),
        collection: None,
        parent_id: None,
        key: None,
    }
}

fn mail_dead() -> DeadSelector {
    DeadSelector::Filter {
        lambda: "mail".into(),
        collection: None,
    }
}

fn mail_cron() -> CronRequest {
    CronRequest {
        lambda: "mail".into(),
        cron: "0 * * * *".into(),
        ..CronRequest::default()
    }
}

fn config() -> LambdaConfig {
    LambdaConfig::default()
}

/// An installation with lambdas mail and billing, each with a task, a cron
/// and a paused gate, served over gRPC with auth on.
struct Fixture {
    /// The Frontend acting for the cluster.
    cluster: Arc<Frontend>,
    store: Arc<dyn TaskStore>,
    address: String,
    /// A task of mail.
    task: String,
    /// The secrets of the tokens of [`KINDS`] but the cluster's.
    secrets: Vec<String>,
    /// A revoked token's secret.
    revoked: String,
}

impl Fixture {
    async fn new() -> Self {
        let store: Arc<dyn TaskStore> =
            Arc::new(SqliteStore::connect("sqlite::memory:").await.unwrap());
        let runtime = Runtime::new(RuntimeConfig {
            allocator: Allocator::OnDemand,
            ..RuntimeConfig::default()
        })
        .unwrap();
        let cluster = Arc::new(Frontend::new(
            store.clone(),
            Arc::new(SystemClock),
            Arc::new(runtime),
            Arc::new(Wake::default()),
        ));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let roles = Roles {
            frontend: Some(cluster.clone()),
            auth: Some(Arc::new(Authenticator::new(
                Some(store.clone()),
                Some(CLUSTER),
            ))),
            ..Roles::default()
        };
        tokio::spawn(waft_api::serve(listener, roles, std::future::pending()));
        let mut fx = Self {
            cluster,
            store,
            address,
            task: String::new(),
            secrets: Vec::new(),
            revoked: String::new(),
        };
        for lambda in ["mail", "billing"] {
            fx.lambda(lambda).await;
        }
        fx.task = fx.fresh_task().await;
        fx.secrets = vec![
            fx.token(TokenRole::Admin, &[]).await.1,
            fx.token(TokenRole::Owner, &["mail"]).await.1,
            fx.token(TokenRole::Owner, &["billing"]).await.1,
            fx.token(TokenRole::Scheduler, &["mail"]).await.1,
            fx.token(TokenRole::Scheduler, &["billing"]).await.1,
        ];
        let (revoked, secret) = fx.token(TokenRole::Admin, &[]).await;
        fx.cluster.token_revoke(&revoked.id).await.unwrap();
        fx.revoked = secret;
        fx
    }

    /// Deploys `lambda` (as stored: the store does not check components),
    /// with a task, a cron and a paused gate.
    async fn lambda(&self, lambda: &str) {
        let deploy = LambdaDeploy {
            name: lambda.into(),
            digest: format!("digest-of-{lambda}"),
            component: lambda.as_bytes().to_vec(),
            artifact: None,
            config: LambdaConfig::default(),
            now: T0,
        };
        self.store.lambda_deploy(deploy).await.unwrap();
        let task = TaskRequest {
            lambda: lambda.into(),
            ..TaskRequest::default()
        };
        self.cluster.task_schedule_many(vec![task]).await.unwrap();
        let cron = CronRequest {
            lambda: lambda.into(),
            ..mail_cron()
        };
        self.cluster.cron_create(cron).await.unwrap();
        let gate = self
            .cluster
            .gate_set(lambda, Some("held"), GateState::Paused);
        gate.await.unwrap();
    }

    /// A new token of `role` for `lambdas`, and its secret.
    async fn token(&self, role: TokenRole, lambdas: &[&str]) -> (Token, String) {
        let lambdas = lambdas.iter().map(|l| (*l).to_owned()).collect();
        self.cluster.token_create("t", role, lambdas).await.unwrap()
    }

    async fn fresh_task(&self) -> String {
        let inserted = self.cluster.task_schedule_many(vec![mail_task()]).await;
        inserted.unwrap().remove(0).id
    }

    async fn fresh_cron(&self) -> String {
        self.cluster.cron_create(mail_cron()).await.unwrap().id
    }

    async fn fresh_token(&self) -> String {
        self.token(TokenRole::Admin, &[]).await.0.id
    }

    /// The Frontend in process, acting for a caller of kind `kind`.
    async fn in_process(&self, kind: usize) -> Arc<dyn FrontendApi> {
        let who = match self.secrets.get(kind) {
            Some(secret) => {
                let auth = Authenticator::new(Some(self.store.clone()), None);
                auth.authenticate(Some(secret)).await.unwrap()
            }
            None => Principal::Cluster,
        };
        Arc::new(self.cluster.acting(who))
    }

    /// The Frontend over gRPC, presenting `token` (none: no token).
    fn client(&self, token: Option<&str>) -> Arc<dyn FrontendApi> {
        let options = ChannelOptions { token, ca: None };
        let channel = waft_api::channel_with(&self.address, options).unwrap();
        Arc::new(FrontendClient::new(channel))
    }

    /// The token of kind `kind`.
    fn secret(&self, kind: usize) -> &str {
        self.secrets.get(kind).map_or(CLUSTER, String::as_str)
    }
}

/// The table's letter for `answer`; `u` for `Unauthenticated`. An allowed
/// call may still be refused for what it asks (a deploy of bytes that are
/// no component, a task that is not found); one that fails inside the
/// Frontend (`Internal`, `Unavailable`) matches no letter of the table.
fn verdict(answer: &Answer) -> char {
    match answer {
        Err(ServiceError::PermissionDenied(_)) => 'n',
        Err(ServiceError::Unauthenticated(_)) => 'u',
        Err(ServiceError::Internal(_) | ServiceError::Unavailable(_)) => '!',
        Ok(Some(true)) => 's',
        Ok(Some(false)) => 'h',
        Ok(None)
        | Err(
            ServiceError::InvalidArgument(_)
            | ServiceError::NotFound(_)
            | ServiceError::FailedPrecondition(_)
            | ServiceError::ResourceExhausted(_),
        ) => 'y',
    }
}

/// An answer's kind, to compare the two ways in: the error's variant, not
/// its words (the client's say which role refused).
fn kind_of(answer: &Answer) -> String {
    match answer {
        Ok(seen) => format!("Ok({seen:?})"),
        Err(error) => format!("{error:?}").split('(').next().unwrap().to_owned(),
    }
}

#[tokio::test]
async fn every_call_gets_the_tables_verdict_in_process_and_over_grpc() {
    let fx = Fixture::new().await;
    let mut wrong = Vec::new();
    for &call in Call::ALL {
        let rule = expected(call);
        for (kind, name) in KINDS.iter().enumerate() {
            let want = rule.chars().nth(kind).unwrap();
            let inside = invoke(&*fx.in_process(kind).await, &fx, call).await;
            let served = invoke(&*fx.client(Some(fx.secret(kind))), &fx, call).await;
            let seen = (verdict(&inside), verdict(&served));
            if seen != (want, want) || kind_of(&inside) != kind_of(&served) {
                wrong.push(format!(
                    "{call:?} by {name}: wanted {want}, in process {inside:?}, over gRPC {served:?}"
                ));
            }
        }
        // Over gRPC, no token and a revoked one reach no call.
        for (token, name) in [(None, "no token"), (Some(&*fx.revoked), "a revoked token")] {
            let answer = invoke(&*fx.client(token), &fx, call).await;
            if verdict(&answer) != 'u' {
                wrong.push(format!("{call:?} with {name}: {answer:?}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A token for no lambda sees no list's rows: its lists are kept to no
/// lambda (for tasks, in the query: `TaskList::lambdas`).
#[tokio::test]
async fn a_token_for_no_lambda_sees_no_rows() {
    let fx = Fixture::new().await;
    let nobody = fx.cluster.acting(Principal::Owner(BTreeSet::new()));
    assert!(
        nobody
            .task_list(TaskList::default())
            .await
            .unwrap()
            .is_empty()
    );
    assert!(nobody.cron_list().await.unwrap().is_empty());
    assert!(nobody.gate_list().await.unwrap().is_empty());
}

/// A scoped caller's page of tasks is a page of theirs: the list is kept
/// to their lambdas in the query, before its limit, so another lambda's
/// newer tasks do not fill the page and leave it empty. In process and
/// over gRPC.
#[tokio::test]
async fn a_scoped_list_is_kept_to_its_lambdas_before_its_limit() {
    let fx = Fixture::new().await;
    let billing = TaskRequest {
        lambda: "billing".into(),
        ..TaskRequest::default()
    };
    let newer = fx.cluster.task_schedule_many(vec![billing; 3]).await;
    newer.unwrap();
    let owner_of_mail = 1;
    let page = TaskList {
        newest_first: true,
        limit: 1,
        ..TaskList::default()
    };
    let ways = [
        fx.in_process(owner_of_mail).await,
        fx.client(Some(fx.secret(owner_of_mail))),
    ];
    for api in ways {
        let tasks = api.task_list(page.clone()).await.unwrap();
        let lambdas: Vec<&str> = tasks.iter().map(|t| t.lambda.as_str()).collect();
        assert_eq!(lambdas, ["mail"]);
    }
}
