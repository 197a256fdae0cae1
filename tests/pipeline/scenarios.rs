//! The scenarios, each run against each mode's installation: a client
//! schedules over gRPC and real `waft` processes run the sample lambdas to
//! a terminal state. A scenario deploys what it needs beyond [`setup`]'s
//! lambdas and assumes nothing of the scenarios run before it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::json;

use waft_core::{ByteSize, LambdaConfig, TaskStatus};
use waft_sample_artifacts as samples;
use waft_services::{AdminApi, ClientApi, CronRequest, RunAt, ServiceError, TaskRequest};
use waft_store::{AttemptOutcome, DeadSelector, GateState, TaskList};

const WITHIN: Duration = Duration::from_secs(30);

pub use crate::deleted_children::deleted_children;
pub use crate::generations::{
    a_restart_on_divergence_schedules_new_children, fresh_starts_schedule_new_children,
};
pub use crate::retention::retention;
use crate::support::Cluster;

/// Deploys the lambdas the scenarios share, once per installation.
pub async fn setup(cluster: &Cluster) {
    cluster.deploy("hello", samples::HELLO, |_| {}).await;
    cluster.deploy("flaky", samples::FLAKY, |_| {}).await;
    cluster
        .deploy("flaky2", samples::FLAKY, |c| c.max_attempts = 2)
        .await;
    cluster.deploy("fatal", samples::FATAL, |_| {}).await;
    cluster
        .deploy("chain", samples::CHAIN, |c| {
            c.allowed_children = vec!["hello".into()]
        })
        .await;
    cluster
        .deploy("hog", samples::HOG, |c| {
            c.limits.max_memory = ByteSize::mib(2)
        })
        .await;
    cluster
        .deploy("one-at-a-time", samples::HELLO, |c| c.concurrency = 1)
        .await;
}

/// The services a server lists through reflection of one version (`v1`
/// or `v1alpha`: the two differ only in their package's name).
macro_rules! reflected {
    ($version:ident, $channel:expr) => {{
        use tonic_reflection::pb::$version::server_reflection_client::ServerReflectionClient;
        use tonic_reflection::pb::$version::server_reflection_request::MessageRequest;
        use tonic_reflection::pb::$version::server_reflection_response::MessageResponse;
        let request = tonic_reflection::pb::$version::ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut answers = ServerReflectionClient::new($channel)
            .server_reflection_info(tokio_stream::once(request))
            .await
            .unwrap()
            .into_inner();
        match answers.message().await.unwrap().unwrap().message_response {
            Some(MessageResponse::ListServicesResponse(list)) => list
                .service
                .into_iter()
                .map(|s| s.name)
                .collect::<Vec<String>>(),
            other => panic!("not a list of services: {other:?}"),
        }
    }};
}

/// Generic gRPC tools work — health, and reflection in both its versions
/// (`grpcurl` asks for v1, Python's `grpcio-reflection` for v1alpha) —
/// and a call to a role a server does not run fails plainly.
pub async fn wrong_role_and_health(cluster: &Cluster) {
    let frontend = cluster.frontend_addr.clone();
    let channel = cluster.channel(&frontend, cluster.token.as_deref());
    // Reflection is open: no token.
    let open = cluster.channel(&frontend, None);
    for services in [reflected!(v1, open.clone()), reflected!(v1alpha, open)] {
        for service in ["waft.v1.Frontend", "grpc.health.v1.Health"] {
            assert!(services.iter().any(|s| s == service), "{services:?}");
        }
    }
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    let serving = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "waft.v1.Frontend".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        serving.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
    let controller = waft_api::ControllerClient::new(channel);
    let error = waft_services::ControllerApi::next_work(
        &controller,
        waft_services::NextWork {
            slots: Vec::new(),
            max_tasks: 1,
            wait: Duration::ZERO,
        },
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&error, ServiceError::FailedPrecondition(m) if m.contains("Controller")),
        "{error:?}"
    );
}

/// The Frontend's port serves the dashboard's page to a plain HTTP/1.1
/// `GET`, and gRPC-web calls, which answer in a body with their trailers
/// (the dashboard's browser tests drive both through a real browser).
/// Plain TCP: `waft dev`'s installation, which has no TLS.
pub async fn page_and_grpc_web(cluster: &Cluster) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let frontend = cluster.frontend_addr.as_str();
    let exchange = |request: Vec<u8>| async move {
        let mut stream = tokio::net::TcpStream::connect(frontend).await.unwrap();
        stream.write_all(&request).await.unwrap();
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.unwrap();
        String::from_utf8_lossy(&response).into_owned()
    };
    let page =
        exchange(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".to_vec()).await;
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(
        page.contains("content-security-policy: default-src 'self'"),
        "{page}"
    );
    assert!(
        page.contains("<script type=\"module\" src=\"/app.js\">"),
        "{page}"
    );
    // An empty ListLambdasRequest in one gRPC-web frame.
    let mut call = b"POST /waft.v1.Frontend/ListLambdas HTTP/1.1\r\nHost: localhost\r\n\
        Content-Type: application/grpc-web+proto\r\nX-Grpc-Web: 1\r\n\
        Content-Length: 5\r\nConnection: close\r\n\r\n"
        .to_vec();
    call.extend_from_slice(&[0, 0, 0, 0, 0]);
    let answer = exchange(call).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("application/grpc-web+proto"), "{answer}");
    assert!(answer.contains("grpc-status:0"), "{answer}");
}

fn denied<T>(result: Result<T, ServiceError>) {
    match result {
        Err(ServiceError::PermissionDenied(_)) => {}
        Err(other) => panic!("expected PermissionDenied, got {other:?}"),
        Ok(_) => panic!("expected PermissionDenied, got success"),
    }
}

/// Tokens: an owner acts on its lambdas only, a scheduler schedules and
/// reads but manages nothing, a call without a token or with a revoked one
/// is refused, and only the cluster token reaches the internal roles. The
/// distributed mode runs with auth on; `waft dev` runs without and says so.
pub async fn auth(cluster: &Cluster) {
    let Some(admin) = &cluster.token else {
        assert!(cluster.logs().contains("auth is off"), "{}", cluster.logs());
        return;
    };
    let create = |name: &str, role: &str| {
        let created = cluster.cli(&[
            "token", "create", name, "--role", role, "--lambda", "hello", "--json",
        ]);
        let created: serde_json::Value = serde_json::from_str(&created).unwrap();
        (
            created["id"].as_str().unwrap().to_owned(),
            created["secret"].as_str().unwrap().to_owned(),
        )
    };
    let (owner_id, owner_secret) = create("hello team", "owner");
    let (_, scheduler_secret) = create("hello scheduler", "scheduler");
    let client = |secret: Option<&str>| {
        waft_api::FrontendClient::new(cluster.channel(&cluster.frontend_addr, secret))
    };
    let hello = std::fs::read(samples::HELLO).unwrap();
    let flaky_task = cluster.schedule("flaky", json!({}), None).await;

    let owner = client(Some(&owner_secret));
    let mine = owner
        .task_schedule_many(vec![TaskRequest {
            lambda: "hello".into(),
            ..TaskRequest::default()
        }])
        .await
        .unwrap();
    assert_eq!(
        cluster.finished(&mine[0].id, WITHIN).await.status,
        TaskStatus::Success
    );
    owner.task_get(&mine[0].id).await.unwrap();
    denied(owner.task_get(&flaky_task).await);
    denied(
        owner
            .lambda_deploy("flaky", hello.clone(), Default::default())
            .await,
    );
    denied(owner.gate_set("flaky", None, GateState::Paused).await);
    denied(owner.token_list().await);
    // Allowing hello to schedule flaky's tasks would hand on a right the
    // owner does not have.
    denied(
        owner
            .lambda_deploy(
                "hello",
                hello.clone(),
                LambdaConfig {
                    allowed_children: vec!["flaky".into()],
                    ..Default::default()
                },
            )
            .await,
    );
    let visible: Vec<String> = owner
        .lambda_list()
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.name)
        .collect();
    assert_eq!(visible, ["hello"]);

    let scheduler = client(Some(&scheduler_secret));
    let scheduled = scheduler
        .task_schedule_many(vec![TaskRequest {
            lambda: "hello".into(),
            ..TaskRequest::default()
        }])
        .await
        .unwrap();
    scheduler.task_get(&scheduled[0].id).await.unwrap();
    // A continuation of a lambda the token may not schedule is refused: the
    // store would create that task later without asking anyone.
    denied(
        scheduler
            .task_schedule_many(vec![TaskRequest {
                lambda: "hello".into(),
                then: Some(waft_store::Continuation {
                    lambda: "flaky".into(),
                    ..Default::default()
                }),
                ..TaskRequest::default()
            }])
            .await,
    );
    denied(scheduler.gate_set("hello", None, GateState::Paused).await);
    denied(
        scheduler
            .lambda_deploy("hello", hello, Default::default())
            .await,
    );
    // The internal roles take only the cluster token: the HSC knows the
    // client tokens and refuses this one's right, the Controller knows none.
    let channel = |role: &str| {
        let addr = cluster.processes[role].listen();
        cluster.channel(&addr, Some(&scheduler_secret))
    };
    let hsc = waft_api::HscClient::new(channel("hsc"));
    denied(waft_services::HscApi::task_claim_many(&hsc, Vec::new()).await);
    let controller = waft_api::ControllerClient::new(channel("controller"));
    let next = waft_services::ControllerApi::next_work(
        &controller,
        waft_services::NextWork {
            slots: Vec::new(),
            max_tasks: 1,
            wait: Duration::ZERO,
        },
    )
    .await;
    assert!(
        matches!(next, Err(ServiceError::Unauthenticated(_))),
        "{next:?}"
    );

    // No token, or a revoked one: refused, and the CLI says so with code 8.
    let anonymous = client(None).lambda_list().await.unwrap_err();
    assert!(
        matches!(anonymous, ServiceError::Unauthenticated(_)),
        "{anonymous:?}"
    );
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_waft"))
        .args(["lambda", "list"])
        .env("WAFT_SERVER", &cluster.frontend_addr)
        .env("WAFT_CA", &cluster.ca.as_ref().unwrap().1)
        .env_remove("WAFT_TOKEN")
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(8),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stderr).contains("token"));
    cluster.cli(&["token", "revoke", &owner_id]);
    let revoked = owner.lambda_list().await.unwrap_err();
    assert!(
        matches!(revoked, ServiceError::Unauthenticated(_)),
        "{revoked:?}"
    );
    let listed = cluster.cli(&["token", "list", "--json"]);
    assert!(!listed.contains(&owner_secret) && !listed.contains(admin.as_str()));
    assert!(listed.contains("revoked_at"), "{listed}");
}

/// Every role's metrics are served for Prometheus, labelled by lambda, and
/// they count what happened. The scenario makes it happen on lambdas of its
/// own, so that no other scenario's work counts: two successes, a task that
/// fails twice before it succeeds, a memory breach, a burst refused by its
/// quota. Each counter must move by just that, summed over the processes as
/// Prometheus would: the store's own record of the tasks says how much (a
/// very busy machine may add attempts, or a second send). Then a backlog
/// deeper than the Controller buffers must show in the backlog's gauges:
/// a gauge that never moves fails it.
pub async fn metrics(cluster: &Cluster) {
    use waft_store::Task;

    cluster.deploy("counted", samples::HELLO, |_| {}).await;
    cluster
        .deploy("counted-flaky", samples::FLAKY, |_| {})
        .await;
    cluster
        .deploy("counted-hog", samples::HOG, |c| {
            c.limits.max_memory = ByteSize::mib(2)
        })
        .await;
    cluster
        .deploy("metered", samples::HELLO, |c| c.quota_per_sec = Some(1.0))
        .await;
    let before = scrape(cluster).await;

    let mut ids = Vec::new();
    for (lambda, payload) in [
        ("counted", json!({"name": "one"})),
        ("counted", json!({"name": "two"})),
        ("counted-flaky", json!({"succeed_on": 3})),
        ("counted-hog", json!({})),
    ] {
        ids.push(cluster.schedule(lambda, payload, None).await);
    }
    let mut tasks: Vec<Task> = Vec::new();
    for id in &ids {
        tasks.push(cluster.finished(id, WITHIN).await);
    }
    let statuses: Vec<TaskStatus> = tasks.iter().map(|t| t.status).collect();
    assert_eq!(
        statuses,
        [
            TaskStatus::Success,
            TaskStatus::Success,
            TaskStatus::Success,
            TaskStatus::FatalFailure
        ],
        "{tasks:#?}"
    );
    let burst = vec![
        TaskRequest {
            lambda: "metered".into(),
            ..TaskRequest::default()
        };
        20
    ];
    let refused = cluster.frontend.task_schedule_many(burst).await;
    assert!(
        matches!(refused, Err(ServiceError::ResourceExhausted(_))),
        "{refused:?}"
    );

    // How often each lambda's tasks ran (each execution was sent to a
    // queue first).
    let ran = |lambda: &str| -> f64 {
        let runs = tasks
            .iter()
            .filter(|t| t.lambda == lambda)
            .map(|t| t.attempt);
        f64::from(runs.sum::<u32>())
    };
    let attempts = cluster.frontend.task_attempts(&ids[2]).await.unwrap();
    let retried = attempts
        .iter()
        .filter(|a| a.outcome == AttemptOutcome::Retriable)
        .count() as f64;
    let exactly = |by: f64| (by, by);
    // Sent once per execution; again only if one waits unclaimed for the
    // enqueue timeout, as it might on a very busy machine: short of
    // counting every send twice.
    let sends = |lambda: &str| (ran(lambda), 2.0 * ran(lambda) - 1.0);
    let expected = [
        (
            r#"waft_tasks_scheduled_total{lambda="counted"}"#,
            exactly(2.0),
        ),
        (
            r#"waft_tasks_scheduled_total{lambda="metered"}"#,
            exactly(0.0),
        ),
        (
            r#"waft_tasks_refused_by_quota_total{lambda="metered"}"#,
            exactly(20.0),
        ),
        (
            r#"waft_tasks_enqueued_total{lambda="counted",priority="0"}"#,
            sends("counted"),
        ),
        (
            r#"waft_tasks_enqueued_total{lambda="counted-flaky",priority="0"}"#,
            sends("counted-flaky"),
        ),
        (
            r#"waft_executions_started_total{lambda="counted"}"#,
            exactly(ran("counted")),
        ),
        (
            r#"waft_executions_started_total{lambda="counted-flaky"}"#,
            exactly(ran("counted-flaky")),
        ),
        (
            r#"waft_executions_started_total{lambda="counted-hog"}"#,
            exactly(1.0),
        ),
        (
            r#"waft_executions_ended_total{lambda="counted",outcome="success"}"#,
            exactly(2.0),
        ),
        (
            r#"waft_executions_ended_total{lambda="counted-flaky",outcome="retriable"}"#,
            exactly(retried),
        ),
        (
            r#"waft_executions_ended_total{lambda="counted-flaky",outcome="success"}"#,
            exactly(1.0),
        ),
        (
            r#"waft_executions_ended_total{lambda="counted-hog",outcome="limit-memory"}"#,
            exactly(1.0),
        ),
        (
            r#"waft_limit_breaches_total{lambda="counted-hog",limit="memory"}"#,
            exactly(1.0),
        ),
        // First attempts only.
        (
            r#"waft_schedule_to_start_seconds_count{lambda="counted"}"#,
            exactly(2.0),
        ),
        (
            r#"waft_schedule_to_start_seconds_count{lambda="counted-flaky"}"#,
            exactly(1.0),
        ),
        (
            r#"waft_execution_seconds_count{lambda="counted"}"#,
            exactly(2.0),
        ),
    ];
    // The counts are made before a result is reported, but the enqueue
    // count after its send: allow a moment for it.
    let deadline = Instant::now() + WITHIN;
    loop {
        let after = scrape(cluster).await;
        let wrong: Vec<String> = expected
            .iter()
            .filter_map(|(series, (least, most))| {
                let by = total(&after, series) - total(&before, series);
                (by < *least || by > *most)
                    .then(|| format!("{series} moved by {by}, not {least}..={most}"))
            })
            .collect();
        if wrong.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{}\n{}",
            wrong.join("\n"),
            after.join("\n")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A backlog the gauges must show, measured every few seconds: more
    // tasks than the Controller buffers (256 a queue), one running at a
    // time, so that messages wait in the queue itself and the oldest due
    // task waits for seconds.
    cluster
        .deploy("deep", samples::SLEEPY, |c| c.concurrency = 1)
        .await;
    let deep = cluster
        .frontend
        .task_schedule_many(
            (0..300)
                .map(|_| TaskRequest {
                    lambda: "deep".into(),
                    payload: json!({"steps": 10, "step_ms": 100})
                        .to_string()
                        .into_bytes(),
                    ..TaskRequest::default()
                })
                .collect(),
        )
        .await
        .unwrap();
    let depth = r#"waft_queue_depth{lambda="deep",priority="0"}"#;
    let age = r#"waft_oldest_ready_task_age_seconds{lambda="deep",priority="0"}"#;
    let (mut deepest, mut oldest) = (0.0f64, 0.0f64);
    let deadline = Instant::now() + WITHIN;
    while deepest < 1.0 || oldest < 1.0 {
        assert!(
            Instant::now() < deadline,
            "the backlog's gauges did not move: queue depth at most {deepest}, \
             oldest waiting task at most {oldest} s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        // Every consumer measures the same backlog: the largest reading.
        for text in scrape(cluster).await {
            deepest = deepest.max(value(&text, depth));
            oldest = oldest.max(value(&text, age));
        }
    }
    eprintln!("backlog of 300: queue depth {deepest}, oldest waiting task {oldest} s");
    for task in deep {
        let _ = cluster.frontend.task_cancel(&task.id).await;
    }
}

/// What every process of `cluster` serves at `/metrics`.
async fn scrape(cluster: &Cluster) -> Vec<String> {
    let mut texts = Vec::new();
    for name in cluster.processes.keys() {
        texts.push(cluster.metrics(name).await);
    }
    texts
}

/// The value of `series` (a metric's name and labels, as served) in one
/// process's `text`; 0 when absent, as a counter not yet moved is.
fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| {
            let rest = line.strip_prefix(series)?.strip_prefix(' ')?;
            rest.split_whitespace().next()?.parse().ok()
        })
        .unwrap_or(0.0)
}

/// `series` summed over every process, as Prometheus would.
fn total(texts: &[String], series: &str) -> f64 {
    texts.iter().map(|text| value(text, series)).sum()
}

/// Schedule→claim latency of one task of `lambda` scheduled now, in ms.
async fn start_latency(cluster: &Cluster, lambda: &str) -> i64 {
    let id = cluster
        .schedule(lambda, json!({"name": "calm"}), None)
        .await;
    let task = cluster.finished(&id, WITHIN).await;
    assert_eq!(task.status, TaskStatus::Success);
    task.claimed_at.unwrap() - task.created_at
}

fn median(mut values: Vec<i64>) -> i64 {
    values.sort_unstable();
    values[values.len() / 2]
}

/// Quotas. Flooding lambda A at 100× its quota is refused at the Frontend
/// beyond the quota, while lambda B's tasks keep running (their
/// schedule→start latency is printed: a figure, not a bound). A backlog of
/// A that came due at once after its quota was set starts at A's rate, not
/// all at once, each task no sooner than its slot; and a task of B
/// scheduled meanwhile does not wait behind it.
pub async fn quotas(cluster: &Cluster) {
    const QUOTA: f64 = 20.0;
    cluster
        .deploy("flood", samples::HELLO, |c| c.quota_per_sec = Some(QUOTA))
        .await;
    cluster.deploy("calm", samples::HELLO, |_| {}).await;
    let mut baseline = Vec::new();
    for _ in 0..5 {
        baseline.push(start_latency(cluster, "calm").await);
    }

    // 100× the quota for three seconds: batches of 20 every 10 ms (fewer
    // on a busy machine; still far over the quota).
    let flooding = Duration::from_secs(3);
    let frontend = cluster.frontend.clone();
    let flood = tokio::spawn(async move {
        let (mut admitted, mut refused) = (0, 0);
        let until = Instant::now() + flooding;
        while Instant::now() < until {
            let batch = vec![
                TaskRequest {
                    lambda: "flood".into(),
                    ..TaskRequest::default()
                };
                20
            ];
            match frontend.task_schedule_many(batch).await {
                Ok(tasks) => admitted += tasks.len(),
                Err(ServiceError::ResourceExhausted(_)) => refused += 20,
                Err(error) => panic!("{error:?}"),
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        (admitted, refused)
    });
    let mut during = Vec::new();
    while !flood.is_finished() {
        during.push(start_latency(cluster, "calm").await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (admitted, refused) = flood.await.unwrap();
    // A second's worth at once (the first batch), then the quota's rate.
    let most = (QUOTA * (flooding.as_secs_f64() + 1.0)) as usize + 20;
    assert!(
        QUOTA as usize <= admitted && admitted <= most && refused > 0,
        "admitted {admitted}, refused {refused}"
    );
    eprintln!(
        "flood: {admitted} admitted, {refused} refused; calm lambda schedule→start: baseline \
         median {} ms; during the flood median {} ms, max {} ms over {} tasks",
        median(baseline.clone()),
        median(during.clone()),
        during.iter().max().unwrap(),
        during.len()
    );

    // A backlog that predates the quota: 200 tasks held by a paused gate
    // while the quota is deployed (so none can start before it, however
    // long the deploy takes), then released at once.
    cluster.deploy("backlog", samples::HELLO, |_| {}).await;
    cluster
        .frontend
        .gate_set("backlog", None, GateState::Paused)
        .await
        .unwrap();
    let due = cluster.frontend.task_schedule_many(
        (0..200)
            .map(|_| TaskRequest {
                lambda: "backlog".into(),
                ..TaskRequest::default()
            })
            .collect(),
    );
    let ids: Vec<String> = due.await.unwrap().into_iter().map(|t| t.id).collect();
    cluster
        .deploy("backlog", samples::HELLO, |c| c.quota_per_sec = Some(QUOTA))
        .await;
    cluster
        .frontend
        .gate_set("backlog", None, GateState::Open)
        .await
        .unwrap();
    let calm = cluster
        .schedule("calm", json!({"name": "beside"}), None)
        .await;
    let backlog = drained(cluster, "backlog", &ids).await;
    for task in &backlog {
        assert_eq!(task.status, TaskStatus::Success, "{task:#?}");
    }
    let calm = cluster.finished(&calm, WITHIN).await;
    assert_eq!(calm.status, TaskStatus::Success);

    // Pacing, whatever the machine's speed: the first second's worth is
    // sent at once, and each later one no sooner than its slot, 1/QUOTA
    // apart (store times, whole milliseconds). A busy machine only makes
    // them later.
    let mut sent: Vec<i64> = backlog.iter().map(|t| t.enqueued_at.unwrap()).collect();
    sent.sort_unstable();
    let slot = 1000.0 / QUOTA;
    for (k, at) in sent.iter().enumerate() {
        let earliest = sent[0] + (k as f64 * slot - 1000.0).ceil() as i64 - 1;
        assert!(
            *at >= earliest,
            "task {k} of the backlog sent {} ms after the first; its slot is at {} ms",
            at - sent[0],
            earliest - sent[0]
        );
    }
    // Isolation: `calm` started while the backlog was still being paced
    // (its last task is sent 8.95 s after the first at the soonest); had it
    // waited behind the backlog, it would have started after.
    let last = *sent.last().unwrap();
    assert!(
        calm.claimed_at.unwrap() < last,
        "calm started {} ms after the backlog's last task was sent",
        calm.claimed_at.unwrap() - last
    );
    let mut claims: Vec<i64> = backlog.iter().map(|t| t.claimed_at.unwrap()).collect();
    claims.sort_unstable();
    let first_second = claims.iter().filter(|&&at| at < claims[0] + 1000).count();
    eprintln!(
        "backlog of 200 at {QUOTA}/s: {first_second} started in the first second, all within \
         {} ms; calm beside it: {} ms schedule→start",
        claims[199] - claims[0],
        calm.claimed_at.unwrap() - calm.created_at
    );
}

/// A cron schedule makes one task per occurrence, even with two consumers
/// (the distributed mode runs two); removing it stops them. A bad
/// expression, time zone or lambda is refused and nothing is stored.
pub async fn periodic(cluster: &Cluster) {
    cluster.deploy("ticker", samples::HELLO, |_| {}).await;
    let added = cluster.cli(&[
        "cron",
        "add",
        "ticker",
        "* * * * * *",
        "--payload",
        r#"{"name": "tick"}"#,
        "--timezone",
        "Europe/Paris",
        "--json",
    ]);
    let added: serde_json::Value = serde_json::from_str(&added).unwrap();
    let id = added["id"].as_str().unwrap().to_owned();
    let ticks = || async {
        let all = TaskList {
            lambda: Some("ticker".into()),
            limit: 1000,
            ..TaskList::default()
        };
        cluster.frontend.task_list(all).await.unwrap()
    };
    let deadline = Instant::now() + WITHIN;
    while ticks()
        .await
        .iter()
        .filter(|t| t.status == TaskStatus::Success)
        .count()
        < 3
    {
        assert!(Instant::now() < deadline, "no ticks:\n{}", cluster.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(cluster.cli(&["cron", "list"]).contains(&id));
    cluster.cli(&["cron", "remove", &id]);
    assert!(!cluster.cli(&["cron", "list"]).contains(&id));

    // Tasks made one turn ahead may still appear; then no more.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let tasks = ticks().await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(ticks().await.len(), tasks.len(), "ticks after removal");
    let mut occurrences: Vec<i64> = tasks.iter().map(|t| t.scheduled_at).collect();
    occurrences.sort_unstable();
    occurrences.dedup();
    assert_eq!(occurrences.len(), tasks.len(), "an occurrence ran twice");
    for task in &tasks {
        assert_eq!(task.cron_id.as_deref(), Some(id.as_str()));
        assert_eq!(task.scheduled_at % 1000, 0, "not on a whole second");
        assert_eq!(task.payload, br#"{"name": "tick"}"#);
    }

    let request = |cron: &str, timezone: &str, lambda: &str| CronRequest {
        lambda: lambda.into(),
        cron: cron.into(),
        timezone: Some(timezone.into()),
        ..CronRequest::default()
    };
    let cases = [
        (
            request("61 * * * *", "UTC", "ticker"),
            "invalid cron expression",
        ),
        (
            request("0 3 * * *", "Mars/Olympus", "ticker"),
            "unknown time zone",
        ),
        (request("0 3 * * *", "UTC", "nope"), "unknown lambda"),
    ];
    for (bad, expected) in cases {
        let preview = cluster
            .frontend
            .cron_preview(&bad.cron, bad.timezone.as_deref(), 3)
            .await;
        if bad.lambda == "ticker" {
            let error = preview.unwrap_err();
            assert!(
                matches!(error, ServiceError::InvalidArgument(_)),
                "{error:?}"
            );
            assert!(error.to_string().contains(expected), "{error:?}");
        }
        let error = cluster.frontend.cron_create(bad).await.unwrap_err();
        assert!(error.to_string().contains(expected), "{error:?}");
    }
    // A preview saves nothing; it counts 5 by default and 100 at most.
    let daily = cluster
        .frontend
        .cron_preview("0 3 * * *", Some("UTC"), 3)
        .await
        .unwrap();
    assert_eq!(daily.len(), 3);
    assert!(
        daily.iter().all(|at| at % 86_400_000 == 3 * 3_600_000),
        "{daily:?}"
    );
    assert!(
        daily.windows(2).all(|w| w[1] - w[0] == 86_400_000),
        "{daily:?}"
    );
    let counted = |count| cluster.frontend.cron_preview("* * * * *", None, count);
    assert_eq!(counted(0).await.unwrap().len(), 5);
    assert_eq!(counted(1000).await.unwrap().len(), 100);
    assert!(cluster.frontend.cron_list().await.unwrap().is_empty());
    let error = cluster.frontend.cron_delete(&id).await.unwrap_err();
    assert!(matches!(error, ServiceError::NotFound(_)), "{error:?}");
}

/// A paused lambda's tasks wait in the store until it resumes; a dropped
/// collection's tasks end as dropped.
pub async fn gates(cluster: &Cluster) {
    cluster
        .frontend
        .gate_set("hello", None, GateState::Paused)
        .await
        .unwrap();
    let id = cluster
        .schedule("hello", json!({"name": "later"}), None)
        .await;
    let held = cluster.until(&id, WITHIN, |t| t.held).await;
    assert_eq!(held.status, TaskStatus::New);
    // The overview counts it held, not ready.
    let overview = cluster
        .frontend
        .lambda_stats(Duration::from_secs(3600))
        .await
        .unwrap();
    let hello = overview.lambdas.iter().find(|s| s.lambda == "hello");
    let hello = hello.expect("hello in the overview");
    assert!(hello.held >= 1 && hello.ready.is_empty(), "{hello:?}");
    assert!(overview.now > held.created_at, "the store's clock");
    let gates = cluster.frontend.gate_list().await.unwrap();
    assert!(
        gates
            .iter()
            .any(|g| g.lambda == "hello" && g.state == GateState::Paused)
    );
    let released = cluster
        .frontend
        .gate_set("hello", None, GateState::Open)
        .await
        .unwrap();
    assert_eq!(released, 1);
    assert_eq!(
        cluster.finished(&id, WITHIN).await.status,
        TaskStatus::Success
    );

    cluster
        .frontend
        .gate_set("hello", Some("promo"), GateState::Dropped)
        .await
        .unwrap();
    let request = TaskRequest {
        lambda: "hello".into(),
        collection: Some("promo".into()),
        ..TaskRequest::default()
    };
    let id = cluster
        .frontend
        .task_schedule_many(vec![request])
        .await
        .unwrap()[0]
        .id
        .clone();
    assert_eq!(
        cluster.finished(&id, WITHIN).await.status,
        TaskStatus::Dropped
    );
    let unknown = cluster
        .frontend
        .gate_set("nope", None, GateState::Paused)
        .await
        .unwrap_err();
    assert!(matches!(unknown, ServiceError::NotFound(_)), "{unknown:?}");
}

pub async fn success(cluster: &Cluster) {
    let id = cluster
        .schedule("hello", json!({"name": "Ada"}), None)
        .await;
    let task = cluster.finished(&id, WITHIN).await;
    assert_eq!(task.status, TaskStatus::Success, "{task:#?}");
    assert_eq!(task.attempt, 1);
    let output: serde_json::Value =
        serde_json::from_slice(task.output.as_deref().unwrap()).unwrap();
    assert_eq!(output, json!({"greeting": "Hello, Ada!"}));
    assert!(task.log.unwrap().contains("greeted on attempt 1"));
}

pub async fn retry_then_success(cluster: &Cluster) {
    let id = cluster
        .schedule("flaky", json!({"succeed_on": 3}), None)
        .await;
    let task = cluster.finished(&id, WITHIN).await;
    assert_eq!(
        (task.status, task.attempt),
        (TaskStatus::Success, 3),
        "{task:#?}"
    );
    // Two backoffs of at least half of 50 ms and 100 ms (equal jitter).
    let took = task.finished_at.unwrap() - task.created_at;
    assert!(took >= 75, "retried after {took} ms only");
}

pub async fn fatal(cluster: &Cluster) {
    let id = cluster.schedule("fatal", json!({}), None).await;
    let task = cluster.finished(&id, WITHIN).await;
    assert_eq!((task.status, task.attempt), (TaskStatus::FatalFailure, 1));
    assert!(task.last_error.unwrap().contains("no such account"));
}

pub async fn dead_letter(cluster: &Cluster) {
    let id = cluster
        .schedule("flaky2", json!({"succeed_on": 10}), None)
        .await;
    let task = cluster.finished(&id, WITHIN).await;
    assert_eq!(
        (task.status, task.attempt),
        (TaskStatus::Dead, 2),
        "{task:#?}"
    );
    assert!(task.last_error.is_some());
    // Inspect it: both executions, each with its own error and log.
    let shown: serde_json::Value =
        serde_json::from_str(&cluster.cli(&["dlq", "show", &id, "--json"])).unwrap();
    assert_eq!(shown["task"]["status"], "dead");
    let attempts = shown["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{shown:#}");
    for (n, attempt) in attempts.iter().enumerate() {
        assert_eq!(attempt["attempt"], n + 1);
        assert_eq!(attempt["outcome"], "retriable");
        assert!(attempt["error"].as_str().is_some_and(|e| !e.is_empty()));
        let log = attempt["log"].as_str().unwrap_or_default();
        assert!(log.contains(&format!("attempt {}", n + 1)), "{attempt:#}");
    }

    // Fix, redeploy, redrive: the dead task runs again on the new version.
    let not_dead = cluster
        .frontend
        .dead_redrive(
            DeadSelector::Ids(vec![id.clone(), "no-such-task".into()]),
            None,
            false,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(not_dead, ServiceError::NotFound(_)),
        "{not_dead:?}"
    );
    cluster
        .deploy("flaky2", samples::HELLO, |c| c.max_attempts = 2)
        .await;
    let unknown = cluster
        .frontend
        .dead_redrive(
            DeadSelector::Filter {
                lambda: "flaky2".into(),
                collection: None,
            },
            Some(9),
            false,
        )
        .await
        .unwrap_err();
    assert!(matches!(unknown, ServiceError::NotFound(_)), "{unknown:?}");
    let redriven = cluster.cli(&["dlq", "redrive", &id, "--version", "2"]);
    assert!(redriven.starts_with("1 dead tasks redriven"), "{redriven}");
    let task = cluster.finished(&id, WITHIN).await;
    assert_eq!(task.version, Some(2));
    assert_eq!(
        (task.status, task.attempt),
        (TaskStatus::Success, 1),
        "{task:#?}"
    );
    // The history keeps the dead attempts before the redriven one.
    let attempts = cluster.frontend.task_attempts(&id).await.unwrap();
    let outcomes: Vec<_> = attempts.iter().map(|a| (a.attempt, a.outcome)).collect();
    assert_eq!(
        outcomes,
        [
            (1, AttemptOutcome::Retriable),
            (2, AttemptOutcome::Retriable),
            (1, AttemptOutcome::Success)
        ]
    );
    let unknown = cluster.frontend.task_attempts("nope").await.unwrap_err();
    assert!(matches!(unknown, ServiceError::NotFound(_)), "{unknown:?}");
    // No journal entry replayed: the attempts say so, and an unknown
    // task's journal is "not found" (exit code 4).
    let shown: serde_json::Value =
        serde_json::from_str(&cluster.cli(&["dlq", "show", &id, "--json"])).unwrap();
    let replayed: Vec<&serde_json::Value> = shown["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| &a["replayed"])
        .collect();
    assert_eq!(replayed, [&json!(0); 3], "{shown:#}");
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_waft"));
    command
        .args(["task", "journal", "nope"])
        .env("WAFT_SERVER", &cluster.frontend_addr);
    if let Some(token) = &cluster.token {
        command.env("WAFT_TOKEN", token);
    }
    if let Some((_, ca)) = &cluster.ca {
        command.env("WAFT_CA", ca);
    }
    let output = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(4), "{stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
}

pub async fn over_its_limit(cluster: &Cluster) {
    let id = cluster.schedule("hog", json!({}), None).await;
    let task = cluster.finished(&id, WITHIN).await;
    assert_eq!(task.status, TaskStatus::FatalFailure, "{task:#?}");
    let error = task.last_error.unwrap();
    assert!(error.contains("limit exceeded (memory)"), "{error}");
}

pub async fn chaining(cluster: &Cluster) {
    let id = cluster
        .schedule(
            "chain",
            json!({"lambda": "hello", "names": ["v", "w", "x", "y", "z"], "key": "chain acme/é"}),
            None,
        )
        .await;
    let parent = cluster.finished(&id, WITHIN).await;
    assert_eq!(parent.status, TaskStatus::Success, "{parent:#?}");
    let children = cluster
        .frontend
        .task_list(TaskList {
            parent_id: Some(id.clone()),
            ..TaskList::default()
        })
        .await
        .unwrap();
    assert_eq!(children.len(), 5);
    // The first child is written at once, the others in a batch: each
    // under the id the lambda was told.
    let output: serde_json::Value =
        serde_json::from_slice(parent.output.as_deref().unwrap()).unwrap();
    let mut told: Vec<&str> = output["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap())
        .collect();
    let mut stored: Vec<&str> = children.iter().map(|child| child.id.as_str()).collect();
    told.sort_unstable();
    stored.sort_unstable();
    assert_eq!(told, stored);
    for child in children {
        let child = cluster.finished(&child.id, WITHIN).await;
        assert_eq!(child.status, TaskStatus::Success);
        assert_eq!(child.parent_id.as_deref(), Some(id.as_str()));
        assert_eq!(child.key.as_deref(), Some("chain acme/é"));
    }
    // Listed by their key, through the CLI too.
    let keyed = cluster.cli(&[
        "task",
        "list",
        "--lambda",
        "hello",
        "--key",
        "chain acme/é",
        "--json",
    ]);
    let keyed: serde_json::Value = serde_json::from_str(&keyed).unwrap();
    assert_eq!(keyed.as_array().unwrap().len(), 5, "{keyed}");

    // The CLI shows the chain and the parent's log.
    let tree = cluster.cli(&["task", "tree", &id, "--json"]);
    let tree: serde_json::Value = serde_json::from_str(&tree).unwrap();
    assert_eq!(tree["status"], "success");
    let children = tree["children"].as_array().unwrap();
    assert_eq!(children.len(), 5);
    assert!(children.iter().all(|c| c["status"] == "success"));
    let logs = cluster.cli(&["task", "logs", &id]);
    assert!(logs.contains("scheduled 5 children"), "{logs}");
    // Its journal: the five children, made live by its one attempt.
    let journal = cluster.cli(&["task", "journal", &id, "--json"]);
    let journal: serde_json::Value = serde_json::from_str(&journal).unwrap();
    let scheduled: Vec<&serde_json::Value> = journal["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["call"] == "waft:lambda/children.schedule")
        .collect();
    assert_eq!(scheduled.len(), 5, "{journal:#}");
    for entry in scheduled {
        assert_eq!(
            (
                &entry["live_attempt"],
                &entry["replayed_by"],
                &entry["outside"]
            ),
            (&json!(1), &json!([]), &json!(true)),
            "{journal:#}"
        );
    }
    let table = cluster.cli(&["task", "journal", &id]);
    assert!(
        table.starts_with("SEQ") && table.contains("live #1"),
        "{table}"
    );
    // A lambda deployed to restart on divergence says so.
    let deployed = cluster.cli(&[
        "lambda",
        "deploy",
        "chain-restarting",
        samples::CHAIN,
        "--on-divergence",
        "restart",
        "--json",
    ]);
    let deployed: serde_json::Value = serde_json::from_str(&deployed).unwrap();
    assert_eq!(
        deployed["config"]["on_divergence"], "restart",
        "{deployed:#}"
    );
    let shown = cluster.cli(&["lambda", "get", "chain", "--json"]);
    let shown: serde_json::Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(shown["config"]["on_divergence"], "fail", "{shown:#}");

    // Children of a lambda it was not allowed are refused, and the task's
    // log says what to grant.
    let id = cluster
        .schedule("chain", json!({"lambda": "fatal", "names": ["x"]}), None)
        .await;
    let parent = cluster.finished(&id, WITHIN).await;
    assert_eq!(parent.status, TaskStatus::FatalFailure, "{parent:#?}");
    let logs = cluster.cli(&["task", "logs", &id]);
    assert!(
        logs.contains("refused to schedule a child") && logs.contains("--allow-child fatal"),
        "{logs}"
    );

    // A continuation declared at schedule time runs with the output.
    let first = cluster.cli(&[
        "task",
        "schedule",
        "hello",
        "--payload",
        r#"{"name": "Ada"}"#,
        "--then",
        "hello",
    ]);
    let first = cluster.finished(first.trim(), WITHIN).await;
    assert_eq!(first.status, TaskStatus::Success);
    let shown: serde_json::Value =
        serde_json::from_str(&cluster.cli(&["task", "get", &first.id, "--json"])).unwrap();
    assert_eq!(shown["then"]["lambda"], "hello");
    let children = shown["children"].as_array().unwrap();
    assert_eq!(children.len(), 1, "{shown:#}");
    let next = cluster
        .finished(children[0].as_str().unwrap(), WITHIN)
        .await;
    assert_eq!(next.status, TaskStatus::Success, "{next:#?}");
    assert_eq!(Some(next.payload), first.output);
    assert_eq!(next.parent_id, Some(first.id));
}

pub async fn cancel(cluster: &Cluster) {
    let request = TaskRequest {
        lambda: "hello".into(),
        run_at: RunAt::After(Duration::from_secs(3600)),
        ..TaskRequest::default()
    };
    let id = cluster
        .frontend
        .task_schedule_many(vec![request])
        .await
        .unwrap()[0]
        .id
        .clone();
    let task = cluster.frontend.task_cancel(&id).await.unwrap();
    assert_eq!(task.status, TaskStatus::Cancelled);
    let again = cluster.frontend.task_cancel(&id).await.unwrap_err();
    assert!(
        matches!(again, ServiceError::FailedPrecondition(_)),
        "{again:?}"
    );
}

pub async fn bad_input_stores_nothing(cluster: &Cluster) {
    let before = cluster
        .frontend
        .task_list(TaskList::default())
        .await
        .unwrap()
        .len();
    let good = TaskRequest {
        lambda: "hello".into(),
        ..TaskRequest::default()
    };
    let cases = [
        (
            TaskRequest {
                priority: Some(9),
                ..good.clone()
            },
            "priority",
        ),
        (
            TaskRequest {
                lambda: "nope".into(),
                ..good.clone()
            },
            "unknown lambda",
        ),
        (
            TaskRequest {
                payload: vec![b'x'; 300 * 1024],
                ..good.clone()
            },
            "over lambda",
        ),
        (
            TaskRequest {
                run_at: RunAt::At(1),
                ..good.clone()
            },
            "too far",
        ),
    ];
    for (bad, expected) in cases {
        // The bad task rides with a good one: all or nothing.
        let error = cluster
            .frontend
            .task_schedule_many(vec![good.clone(), bad])
            .await
            .unwrap_err();
        assert!(error.to_string().contains(expected), "{error:?}");
    }
    let too_many = vec![good.clone(); 10_001];
    let error = cluster
        .frontend
        .task_schedule_many(too_many)
        .await
        .unwrap_err();
    assert!(
        matches!(error, ServiceError::ResourceExhausted(_)),
        "{error:?}"
    );
    let error = cluster
        .frontend
        .lambda_deploy("broken", b"\0asm garbage".to_vec(), Default::default())
        .await
        .unwrap_err();
    assert!(
        matches!(error, ServiceError::InvalidArgument(_)),
        "{error:?}"
    );
    // A payload declared JSON (as the dashboard declares it) is checked.
    let mut raw = waft_api::proto::frontend_client::FrontendClient::new(
        cluster.channel(&cluster.frontend_addr, cluster.token.as_deref()),
    );
    let declared = |payload: &str| waft_api::proto::ScheduleRequest {
        task: Some(waft_api::proto::NewTask {
            lambda: "hello".into(),
            payload: payload.as_bytes().to_vec(),
            payload_is_json: true,
            ..Default::default()
        }),
    };
    let refused = raw.schedule(declared(r#"{"name": "#)).await.unwrap_err();
    let refused = waft_api::status::from_status(refused, "Frontend");
    assert!(
        matches!(&refused, ServiceError::InvalidArgument(m)
            if m.starts_with("the payload is not JSON: EOF while parsing")),
        "{refused:?}"
    );
    let after = cluster
        .frontend
        .task_list(TaskList::default())
        .await
        .unwrap()
        .len();
    assert_eq!(before, after, "a refused request stored tasks");
    raw.schedule(declared(r#"{"name": "JSON"}"#)).await.unwrap();
    assert!(cluster.frontend.lambda_get("broken", None).await.is_err());
}

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

/// A backlog at low priority does not delay a high-priority task: with one
/// task at a time, the high one runs next, not after the backlog.
pub async fn priorities(cluster: &Cluster) {
    const BACKLOG: usize = 100;
    let low: Vec<TaskRequest> = (0..BACKLOG)
        .map(|i| TaskRequest {
            lambda: "one-at-a-time".into(),
            payload: json!({"name": format!("low {i}")}).to_string().into_bytes(),
            priority: Some(0),
            ..TaskRequest::default()
        })
        .collect();
    let low_ids: Vec<String> = cluster
        .frontend
        .task_schedule_many(low)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.id)
        .collect();
    // Let the backlog reach the queues and start running.
    cluster
        .until(&low_ids[0], WITHIN, |t| t.status == TaskStatus::Success)
        .await;
    let high = cluster
        .schedule("one-at-a-time", json!({"name": "vip"}), Some(2))
        .await;
    let high = cluster.finished(&high, WITHIN).await;
    assert_eq!(high.status, TaskStatus::Success);
    let done_before = cluster
        .frontend
        .task_list(TaskList {
            lambda: Some("one-at-a-time".into()),
            status: Some(TaskStatus::Success),
            limit: 1000,
            ..TaskList::default()
        })
        .await
        .unwrap()
        .iter()
        .filter(|t| t.priority == 0 && t.finished_at <= high.finished_at)
        .count();
    assert!(
        done_before < BACKLOG / 2,
        "{done_before} of {BACKLOG} low-priority tasks finished before the high-priority one"
    );
    // The backlog drains too. Queues are not FIFO (SQS standard queues
    // reorder), so no task but the high one has a promised place.
    for task in drained(cluster, "one-at-a-time", &low_ids).await {
        assert_eq!(task.status, TaskStatus::Success, "{task:#?}");
    }
}

/// Waits until every task of `ids` (of `lambda`) ended, and returns them.
/// A backlog drains at the machine's pace: it fails only after a minute in
/// which none ended, a stall.
async fn drained(cluster: &Cluster, lambda: &str, ids: &[String]) -> Vec<waft_store::Task> {
    const STALL: Duration = Duration::from_secs(60);
    let wanted: std::collections::HashSet<&str> = ids.iter().map(String::as_str).collect();
    let (mut done, mut progress) = (0, Instant::now());
    loop {
        let mut tasks = Vec::new();
        loop {
            let page = cluster
                .frontend
                .task_list(TaskList {
                    lambda: Some(lambda.into()),
                    after: tasks.last().map(|t: &waft_store::Task| t.id.clone()),
                    limit: 1000,
                    ..TaskList::default()
                })
                .await
                .unwrap();
            if page.is_empty() {
                break;
            }
            tasks.extend(page);
        }
        tasks.retain(|t| wanted.contains(t.id.as_str()));
        let ended = tasks.iter().filter(|t| t.status.is_terminal()).count();
        if ended == ids.len() {
            return tasks;
        }
        if ended > done {
            (done, progress) = (ended, Instant::now());
        }
        assert!(
            progress.elapsed() < STALL,
            "{done} of {} tasks of {lambda} ended, none in the last {STALL:?}: {:#?}",
            ids.len(),
            tasks.iter().find(|t| !t.status.is_terminal())
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A lambda granted a destination calls it; a retried task sends the same
/// idempotency key on every attempt; anything else is refused and the
/// task's log says what to grant; a component that calls out cannot be
/// deployed without a destination.
pub async fn outbound(cluster: &Cluster) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use waft_testing::http::{HttpServer, Reply};

    let flaky_calls = Arc::new(AtomicUsize::new(0));
    let calls = flaky_calls.clone();
    let server = HttpServer::start(move |request| match request.path.as_str() {
        "/flaky" if calls.fetch_add(1, Ordering::SeqCst) == 0 => Reply::Answer {
            status: 503,
            headers: vec![("retry-after".into(), "0".into())],
            body: Vec::new(),
        },
        _ => Reply::status(200, "received"),
    })
    .await;
    let refused = cluster
        .frontend
        .lambda_deploy(
            "webhook",
            std::fs::read(samples::WEBHOOK).unwrap(),
            LambdaConfig::default(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, ServiceError::InvalidArgument(m)
            if m.contains("wasi:http/outgoing-handler") && m.contains("--allow-outbound")),
        "{refused:?}"
    );
    let url = server.url();
    cluster
        .deploy("webhook", samples::WEBHOOK, |c| {
            c.grants.outbound = vec![url.parse().unwrap()]
        })
        .await;

    let id = cluster
        .schedule(
            "webhook",
            json!({"url": format!("{url}/hook"), "body": {"n": 1}}),
            None,
        )
        .await;
    let task = cluster.finished(&id, WITHIN).await;
    assert_eq!(task.status, TaskStatus::Success, "{task:#?}");

    let id = cluster
        .schedule("webhook", json!({"url": format!("{url}/flaky")}), None)
        .await;
    let task = cluster.finished(&id, WITHIN).await;
    assert_eq!(
        (task.status, task.attempt),
        (TaskStatus::Success, 2),
        "{task:#?}"
    );
    let keys: Vec<_> = server
        .requests()
        .iter()
        .filter(|r| r.path == "/flaky")
        .map(|r| r.header("idempotency-key").map(str::to_owned))
        .collect();
    assert_eq!(keys.len(), 2);
    assert_eq!(keys[0], Some(format!("waft-{id}-0")));
    assert_eq!(keys[0], keys[1]);

    let before = server.requests().len();
    let id = cluster
        .schedule("webhook", json!({"url": "http://127.0.0.1:9/nope"}), None)
        .await;
    let task = cluster.finished(&id, WITHIN).await;
    assert_eq!(task.status, TaskStatus::FatalFailure, "{task:#?}");
    let log = cluster.cli(&["task", "logs", &id]);
    assert!(
        log.contains("not on the lambda's allow-list")
            && log.contains("--allow-outbound http://127.0.0.1:9"),
        "{log}"
    );
    assert_eq!(server.requests().len(), before);

    let executor = if cluster.processes.contains_key("dev") {
        "dev"
    } else {
        "executor1"
    };
    let metrics = cluster.metrics(executor).await;
    for expected in [
        r#"waft_outbound_requests_total{lambda="webhook",host="127.0.0.1",outcome="2xx"}"#,
        r#"waft_outbound_requests_total{lambda="webhook",host="-",outcome="denied"}"#,
    ] {
        assert!(metrics.contains(expected), "no {expected} in:\n{metrics}");
    }
}

/// A secret reaches its lambda's next task, rotated or removed without a
/// redeploy, and never comes back out: not in the task's output, not in
/// any listing.
pub async fn secrets(cluster: &Cluster) {
    use waft_testing::http::{HttpServer, Reply};

    let server = HttpServer::start(|request| {
        Reply::status(200, request.header("authorization").unwrap_or("none"))
    })
    .await;
    let url = server.url();
    cluster
        .deploy("notifier", samples::WEBHOOK, |c| {
            c.grants.outbound = vec![url.parse().unwrap()];
            c.grants.env.insert("SOURCE".into(), "billing".into());
        })
        .await;
    let dir = tempfile::TempDir::new().unwrap();
    let set = |value: &str| {
        let file = dir.path().join("value");
        std::fs::write(&file, format!("{value}\n")).unwrap();
        cluster.cli(&[
            "secret",
            "set",
            "notifier",
            "WEBHOOK_TOKEN",
            "--file",
            &file.display().to_string(),
        ]);
    };
    let call = || async {
        let id = cluster
            .schedule("notifier", json!({"url": format!("{url}/notify")}), None)
            .await;
        let task = cluster.finished(&id, WITHIN).await;
        assert_eq!(task.status, TaskStatus::Success, "{task:#?}");
        (id, task)
    };

    set("tok-first-4b1d");
    let (id, task) = call().await;
    let sent = server.requests().pop().unwrap();
    assert_eq!(sent.header("authorization"), Some("Bearer tok-first-4b1d"));
    assert_eq!(sent.header("x-waft-source"), Some("billing"));
    let output = String::from_utf8(task.output.unwrap()).unwrap();
    assert!(output.contains("Bearer [redacted]"), "{output}");
    for shown in [
        cluster.cli(&["secret", "list", "notifier"]),
        cluster.cli(&["lambda", "get", "notifier", "--json"]),
        cluster.cli(&["task", "get", &id, "--json"]),
        cluster.cli(&["task", "logs", &id]),
    ] {
        assert!(!shown.contains("tok-first-4b1d"), "{shown}");
    }
    assert!(
        cluster
            .cli(&["secret", "list", "notifier"])
            .contains("WEBHOOK_TOKEN")
    );

    set("tok-second-9e2c");
    call().await;
    assert_eq!(
        server.requests().pop().unwrap().header("authorization"),
        Some("Bearer tok-second-9e2c")
    );

    cluster.cli(&["secret", "remove", "notifier", "WEBHOOK_TOKEN"]);
    call().await;
    assert_eq!(
        server.requests().pop().unwrap().header("authorization"),
        None
    );
}

/// Lambdas written in Python deploy and run like any other, the webhook
/// caller with its grant and its secret.
pub async fn python(cluster: &Cluster) {
    let (Some(hello), Some(webhook)) = (samples::PYTHON_HELLO, samples::PYTHON_WEBHOOK) else {
        // The samples' build fails under CI=true instead.
        eprintln!("skipping: componentize-py is not installed (run scripts/setup)");
        return;
    };
    hello_and_webhook(cluster, "py", hello, webhook).await;
}

/// Lambdas written in JavaScript deploy and run like any other, the
/// webhook caller with its grant and its secret.
pub async fn javascript(cluster: &Cluster) {
    let (Some(hello), Some(webhook)) = (samples::JS_HELLO, samples::JS_WEBHOOK) else {
        // The samples' build fails under CI=true instead.
        eprintln!("skipping: componentize-js is not installed (run scripts/setup)");
        return;
    };
    hello_and_webhook(cluster, "js", hello, webhook).await;
}

/// A language's `hello` and `webhook` samples, deployed as `hello-SUFFIX`
/// and `webhook-SUFFIX`, each run once: the webhook calls a real server with
/// the secret it was given as a bearer token.
async fn hello_and_webhook(cluster: &Cluster, suffix: &str, hello: &str, webhook: &str) {
    use waft_testing::http::{HttpServer, Reply};

    // The first task of each compiles its 12–18 MB component on its executor.
    const COMPILING: Duration = Duration::from_secs(120);
    let hello_name = format!("hello-{suffix}");
    cluster
        .deploy(&hello_name, hello, |c| {
            c.allowed_children = vec![hello_name.clone()];
        })
        .await;
    let id = cluster
        .schedule(&hello_name, json!({"name": "Grace"}), None)
        .await;
    let task = cluster.finished(&id, COMPILING).await;
    assert_eq!(task.status, TaskStatus::Success, "{task:#?}");
    let output: serde_json::Value =
        serde_json::from_slice(task.output.as_deref().unwrap()).unwrap();
    assert_eq!(output, json!({"greeting": "Hello, Grace!"}));
    assert!(task.log.unwrap().contains("greeted on attempt 1"));

    // A fan-in: two children of its own, gathered.
    let children = json!([
        {"lambda": hello_name, "payload": {"name": "Ada"}, "key": "ada"},
        {"lambda": hello_name, "payload": {"name": "Lin"}},
    ]);
    let id = cluster
        .schedule(&hello_name, json!({"children": children}), None)
        .await;
    let task = cluster.finished(&id, COMPILING).await;
    assert_eq!(
        (task.status, task.attempt),
        (TaskStatus::Success, 1),
        "{task:#?}"
    );
    let output: serde_json::Value =
        serde_json::from_slice(task.output.as_deref().unwrap()).unwrap();
    let ends = output["ends"].as_array().unwrap();
    assert_eq!(ends.len(), 2, "{output}");
    assert!(
        ends.iter().all(|end| end["status"] == "success"),
        "{output}"
    );
    assert!(
        ends[1]["output"].as_str().unwrap().contains("Hello, Lin!"),
        "{output}"
    );
    // The first child was scheduled with a key, the second without.
    let keys: Vec<Option<String>> = ends
        .iter()
        .map(|end| end["id"].as_str().unwrap())
        .map(|child| {
            let get = cluster.cli(&["task", "get", child, "--json"]);
            let child: serde_json::Value = serde_json::from_str(&get).unwrap();
            child["key"].as_str().map(str::to_owned)
        })
        .collect();
    assert_eq!(keys, [Some("ada".to_owned()), None]);

    let server = HttpServer::start(|request| {
        Reply::status(200, request.header("authorization").unwrap_or("none"))
    })
    .await;
    let url = server.url();
    let webhook_name = format!("webhook-{suffix}");
    cluster
        .deploy(&webhook_name, webhook, |c| {
            c.grants.outbound = vec![url.parse().unwrap()];
        })
        .await;
    let dir = tempfile::TempDir::new().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, format!("tok-{suffix}-61c0")).unwrap();
    cluster.cli(&[
        "secret",
        "set",
        &webhook_name,
        "WEBHOOK_TOKEN",
        "--file",
        &file.display().to_string(),
    ]);
    let id = cluster
        .schedule(
            &webhook_name,
            json!({"url": format!("{url}/{suffix}")}),
            None,
        )
        .await;
    let task = cluster.finished(&id, COMPILING).await;
    assert_eq!(task.status, TaskStatus::Success, "{task:#?}");
    let sent = server.requests().pop().unwrap();
    assert_eq!(sent.path, format!("/{suffix}"));
    assert_eq!(
        sent.header("authorization"),
        Some(format!("Bearer tok-{suffix}-61c0").as_str())
    );
    assert_eq!(
        sent.header("idempotency-key"),
        Some(format!("waft-{id}-0").as_str())
    );
    let output = String::from_utf8(task.output.unwrap()).unwrap();
    assert!(output.contains("Bearer [redacted]"), "{output}");
}

/// A lambda built against the first contract, `waft:lambda@0.1.0`, deploys
/// and runs beside 0.2.0 ones, its host calls answered: it logs,
/// heartbeats and schedules a child of a 0.2.0 lambda.
pub async fn first_contract(cluster: &Cluster) {
    cluster.deploy("hello", samples::HELLO, |_| {}).await;
    cluster
        .deploy("hello-v0-1", samples::HELLO_V0_1, |c| {
            c.allowed_children = vec!["hello".into()]
        })
        .await;
    let id = cluster.schedule("hello-v0-1", json!("Ada"), None).await;
    let task = cluster.finished(&id, Duration::from_secs(30)).await;
    assert_eq!(task.status, TaskStatus::Success, "{task:#?}");
    assert_eq!(task.output.as_deref(), Some(&b"Hello, Ada!"[..]));
    assert!(task.log.unwrap().contains("greeting"));

    let parent = cluster.schedule("hello-v0-1", json!("child"), None).await;
    let parent = cluster.finished(&parent, Duration::from_secs(30)).await;
    assert_eq!(parent.status, TaskStatus::Success, "{parent:#?}");
    let child = String::from_utf8(parent.output.unwrap()).unwrap();
    let child = cluster.finished(&child, Duration::from_secs(30)).await;
    assert_eq!(child.status, TaskStatus::Success, "{child:#?}");
    assert_eq!(child.parent_id.as_deref(), Some(parent.id.as_str()));
}

/// A durable lambda posts three times, then crashes on its first attempt;
/// its second attempt is answered from the journal and succeeds: the server
/// saw each of the three posts once, and the fourth once. Its child was
/// scheduled once. `waft task journal` tells live entries from replayed
/// ones; a redrive `--fresh` would discard the journal.
pub async fn durable(cluster: &Cluster) {
    use waft_testing::http::{HttpServer, Reply};

    let server =
        HttpServer::start(|request| Reply::status(200, &format!("{} bytes", request.body.len())))
            .await;
    let url = server.url();
    cluster
        .deploy("durable", samples::DURABLE, |c| {
            c.grants.outbound = vec![url.parse().unwrap()];
            c.grants.env.insert("REGION".into(), "eu-west-1".into());
        })
        .await;
    let plan = json!({"url": url, "posts": 4, "crash_after": 3, "children": 1});
    let id = cluster.schedule("durable", plan, None).await;
    let task = cluster.finished(&id, WITHIN).await;
    assert_eq!(
        (task.status, task.attempt),
        (TaskStatus::Success, 2),
        "{task:#?}"
    );
    let mut posts: Vec<u64> = server
        .requests()
        .iter()
        .map(|r| {
            serde_json::from_slice::<serde_json::Value>(&r.body).unwrap()["n"]
                .as_u64()
                .unwrap()
        })
        .collect();
    posts.sort_unstable();
    assert_eq!(posts, [0, 1, 2, 3], "each post reached the server once");
    let output: serde_json::Value = serde_json::from_slice(&task.output.unwrap()).unwrap();
    let child = output["children"][0].as_str().unwrap().to_owned();
    let children = cluster
        .frontend
        .task_list(TaskList {
            parent_id: Some(id.clone()),
            ..TaskList::default()
        })
        .await
        .unwrap();
    assert_eq!(children.len(), 1, "{children:#?}");
    assert_eq!(children[0].id, child);

    let journal = cluster.frontend.task_journal(&id, false).await.unwrap();
    let http: Vec<_> = journal
        .iter()
        .filter(|e| e.call == "wasi:http/outgoing-handler.handle")
        .collect();
    assert_eq!(http.len(), 4, "{journal:#?}");
    assert_eq!(
        http.iter().map(|e| e.attempt).collect::<Vec<_>>(),
        [1, 1, 1, 2]
    );
    assert!(
        journal.iter().all(|e| e.answer.is_empty()),
        "no answers for people"
    );
    // The three posts before the crash were replayed by attempt 2; the
    // fourth was made live by it.
    let shown = cluster.cli(&["task", "journal", &id]);
    let posts: Vec<&str> = shown
        .lines()
        .filter(|line| line.contains("wasi:http/outgoing-handler.handle"))
        .collect();
    assert_eq!(posts.len(), 4, "{shown}");
    assert!(
        posts[..3]
            .iter()
            .all(|l| l.contains("live #1, replayed #2")),
        "{shown}"
    );
    assert!(
        posts[3].contains("live #2") && !posts[3].contains("replayed"),
        "{shown}"
    );
}

/// Replay as a debugger: a durable task's journal, exported with `waft
/// task journal ID --json`, runs the lambda locally with `waft invoke
/// --replay` to the same outcome with no request sent; a payload that makes
/// another call is reported with the entry it diverged at; a journal cut
/// short stops where it ends (or goes on live with `--then live`); a bad
/// file is a usage error.
pub async fn replay_locally(cluster: &Cluster) {
    use waft_testing::http::{HttpServer, Reply};

    let server =
        HttpServer::start(|request| Reply::status(200, &format!("{} bytes", request.body.len())))
            .await;
    let url = server.url();
    cluster
        .deploy("replayed", samples::DURABLE, |c| {
            c.grants.outbound = vec![url.parse().unwrap()];
            c.grants.env.insert("REGION".into(), "eu-west-1".into());
        })
        .await;
    let plan = json!({"url": url, "posts": 3, "crash_after": 2});
    let id = cluster.schedule("replayed", plan.clone(), None).await;
    let task = cluster.finished(&id, WITHIN).await;
    assert_eq!(
        (task.status, task.attempt),
        (TaskStatus::Success, 2),
        "{task:#?}"
    );
    assert_eq!(server.requests().len(), 3);

    let exported = cluster.cli(&["task", "journal", &id, "--json"]);
    let document: serde_json::Value = serde_json::from_str(&exported).unwrap();
    assert_eq!(document["task"]["id"], id.as_str());
    assert_eq!(document["task"]["attempts"], 2);
    let entries = document["entries"].as_array().unwrap().clone();
    let posts: Vec<u64> = entries
        .iter()
        .filter(|e| e["call"] == "wasi:http/outgoing-handler.handle")
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(posts.len(), 3, "{document:#}");
    assert!(
        entries.iter().all(|e| e["answer"].as_str().is_some()),
        "{document:#}"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("journal.json");
    std::fs::write(&file, &exported).unwrap();
    let file = file.to_str().unwrap();
    let invoke = |args: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_waft"))
            .arg("invoke")
            .arg(samples::DURABLE)
            .args(args)
            .output()
            .expect("waft runs");
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };

    // The whole attempt, answered from the journal: its output, and not
    // one request more.
    let (code, stdout, stderr) = invoke(&["--replay", file, "--json"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["outcome"], "success", "{report:#}");
    let output: serde_json::Value = serde_json::from_slice(task.output.as_ref().unwrap()).unwrap();
    assert_eq!(report["output"], output, "{report:#}");
    assert_eq!(report["replay"]["replayed"], entries.len(), "{report:#}");
    assert_eq!(server.requests().len(), 3, "the replay sent nothing");
    let (code, text, _) = invoke(&["--replay", file]);
    assert_eq!(code, 0, "{text}");
    let replayed = format!("replay: {n} of {n} journal entries", n = entries.len());
    assert!(text.contains(&replayed), "{text}");

    // Another URL: the first post diverges, and says where and how.
    let other = json!({"url": format!("{url}/other"), "posts": 3, "crash_after": 2}).to_string();
    let (code, text, _) = invoke(&["--replay", file, "--payload", &other]);
    assert_eq!(code, 24, "{text}");
    let diverged = format!("diverged at entry {}", posts[0]);
    assert!(text.contains(&diverged), "{text}");
    assert!(
        text.contains("the journal has wasi:http/outgoing-handler.handle"),
        "{text}"
    );
    assert_eq!(
        server.requests().len(),
        3,
        "nothing goes out after a mismatch"
    );

    // Cut before the last post: stopped there, or on live with a grant.
    let mut cut = document.clone();
    cut["entries"] = json!(entries[..posts[2] as usize]);
    let cut_file = dir.path().join("cut.json");
    std::fs::write(&cut_file, cut.to_string()).unwrap();
    let cut_file = cut_file.to_str().unwrap();
    let (code, text, _) = invoke(&["--replay", cut_file]);
    assert_eq!(code, 0, "{text}");
    let ends = format!(
        "the journal ends at entry {}: the lambda's next call, wasi:http/outgoing-handler.handle",
        posts[2]
    );
    assert!(text.contains(&ends), "{text}");
    assert_eq!(server.requests().len(), 3, "stopped before the post");
    let (code, text, _) = invoke(&[
        "--replay",
        cut_file,
        "--then",
        "live",
        "--allow-outbound",
        &url,
        "--env",
        "REGION=eu-west-1",
    ]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("outcome: success"), "{text}");
    assert!(text.contains("went on live"), "{text}");
    let requests = server.requests();
    assert_eq!(requests.len(), 4, "the last post, live");
    assert_eq!(
        requests[3].header("idempotency-key"),
        requests[2].header("idempotency-key"),
        "the same key as the task's own post"
    );

    // Bad files: a usage error that says what to do.
    let bad = dir.path().join("bad.json");
    for (content, says) in [
        ("{not json", "not JSON"),
        ("[]", "without their answers"),
        (
            r#"{"format":"waft-journal/1","task":{}}"#,
            "not a whole journal document",
        ),
    ] {
        std::fs::write(&bad, content).unwrap();
        let (code, _, stderr) = invoke(&["--replay", bad.to_str().unwrap()]);
        assert_eq!(code, 2, "{stderr}");
        assert!(
            stderr.contains(says) && stderr.contains("waft task journal ID --json"),
            "{stderr}"
        );
    }
    let (code, _, stderr) = invoke(&["--replay", "/nonexistent/journal.json"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("cannot read"), "{stderr}");
}

pub use crate::waits::{durable_sleep, fan_in, signals, suspended_tasks_hold_no_slot};

/// A lambda's concurrency per key: tasks of one key run one after another
/// (`--key-concurrency 1`), whichever executor takes them, a waiting one
/// shows it is parked, and every task ends.
pub async fn key_concurrency(cluster: &Cluster) {
    cluster
        .deploy("per-customer", samples::SLEEPY, |c| {
            c.key_concurrency = Some(1)
        })
        .await;
    let keys = ["acme", "globex", "acme", "globex", "acme"];
    let ids = schedule_keyed(
        cluster,
        "per-customer",
        &keys,
        |_| json!({"steps": 3, "step_ms": 100}),
    )
    .await;
    // Two of acme's three tasks wait while one runs: one of them is seen
    // parked, and says what it waits for (which goes first among tasks
    // scheduled in one millisecond is their ids' order, not the request's).
    let parked = seen_waiting(
        cluster,
        "per-customer",
        "acme",
        "waiting for a free place for key \"acme\"",
        2,
    )
    .await;
    let acme = ids.iter().zip(keys).filter(|(_, key)| *key == "acme");
    assert!(acme.map(|(id, _)| id).any(|id| *id == parked), "{parked}");

    let mut ended = Vec::new();
    for id in &ids {
        let task = cluster.finished(id, WITHIN).await;
        assert_eq!(
            (task.status, task.attempt),
            (TaskStatus::Success, 1),
            "{task:#?}"
        );
        ended.push(task);
    }
    let limited = total(
        &scrape(cluster).await,
        r#"waft_tasks_limited_total{lambda="per-customer",limit="key_concurrency"}"#,
    );
    assert!(limited >= 2.0, "two of acme's tasks were parked: {limited}");
    for key in ["acme", "globex"] {
        let mut runs: Vec<(i64, i64)> = ended
            .iter()
            .filter(|task| task.key.as_deref() == Some(key))
            .map(|task| (task.claimed_at.unwrap(), task.finished_at.unwrap()))
            .collect();
        runs.sort_unstable();
        for pair in runs.windows(2) {
            assert!(
                pair[0].1 <= pair[1].0,
                "two tasks of {key} ran at once: {runs:?}"
            );
        }
    }
}

/// A rate per key, deployed from the CLI: a key's tasks start at most at
/// its rate (two at once, then one a second), each waiting one says so, and
/// other keys are not held back.
pub async fn key_rate(cluster: &Cluster) {
    cluster.cli(&[
        "lambda",
        "deploy",
        "per-key-rate",
        samples::HELLO,
        "--key-rate",
        "2/2s",
    ]);
    let shown: serde_json::Value =
        serde_json::from_str(&cluster.cli(&["lambda", "get", "per-key-rate", "--json"])).unwrap();
    assert_eq!(shown["config"]["key_rate"], json!("2/2s"));
    let (code, error) = cluster.cli_failing(&[
        "lambda",
        "deploy",
        "per-key-rate",
        samples::HELLO,
        "--key-rate",
        "2/never",
    ]);
    assert_eq!(code, 2, "{error}");
    assert!(error.contains("COUNT/PERIOD"), "{error}");

    let keys = ["acme", "acme", "acme", "acme", "globex"];
    let ids = schedule_keyed(cluster, "per-key-rate", &keys, |key| json!({"name": key})).await;
    seen_waiting(
        cluster,
        "per-key-rate",
        "acme",
        "waiting for its slot of key \"acme\"'s rate",
        4,
    )
    .await;

    let mut enqueued = BTreeMap::<&str, Vec<i64>>::new();
    for (id, key) in ids.iter().zip(keys) {
        let task = cluster.finished(id, WITHIN).await;
        assert_eq!(
            (task.status, task.attempt),
            (TaskStatus::Success, 1),
            "{task:#?}"
        );
        enqueued
            .entry(key)
            .or_default()
            .push(task.enqueued_at.unwrap());
    }
    // Slots: the first two at once, then one each second.
    // The consumers counted the two tasks they held back (more only if a
    // message expired unclaimed on a very busy machine).
    let limited = total(
        &scrape(cluster).await,
        r#"waft_tasks_limited_total{lambda="per-key-rate",limit="key_rate"}"#,
    );
    assert!(limited >= 2.0, "{limited}");
    let globex = enqueued["globex"][0];
    let acme = enqueued.get_mut("acme").unwrap();
    acme.sort_unstable();
    assert!(acme[2] - acme[0] >= 1_000, "acme enqueued at {acme:?}");
    assert!(acme[3] - acme[0] >= 2_000, "acme enqueued at {acme:?}");
    assert!(
        globex - acme[0] < 1_000,
        "globex at {globex}, acme {acme:?}"
    );
}

/// Debounce from the CLI: three debounced tasks of one key answer one id,
/// which waits for its window, says so, and runs once with the last
/// payload; a task of another key is apart.
pub async fn debounce(cluster: &Cluster) {
    let schedule = |key: &str, name: &str| {
        let payload = json!({ "name": name }).to_string();
        let shown = cluster.cli(&[
            "task",
            "schedule",
            "hello",
            "--key",
            key,
            "--debounce",
            "3s",
            "--payload",
            &payload,
            "--json",
        ]);
        let shown: serde_json::Value = serde_json::from_str(&shown).unwrap();
        (
            shown["id"].as_str().unwrap().to_owned(),
            shown["created"].as_bool().unwrap(),
        )
    };
    let (first, created) = schedule("doc-1", "first edit");
    assert!(created);
    let waiting = cluster.cli(&["task", "get", &first]);
    assert!(
        waiting.contains("its debounce window: key \"doc-1\"'s debounced tasks collapse into it"),
        "{waiting}"
    );
    assert_eq!(schedule("doc-1", "second edit"), (first.clone(), false));
    assert_eq!(schedule("doc-1", "last edit"), (first.clone(), false));
    let (other, created) = schedule("doc-2", "another");
    assert!(created && other != first);
    let (code, error) = cluster.cli_failing(&["task", "schedule", "hello", "--debounce", "1s"]);
    assert_eq!(code, 2, "{error}");
    assert!(error.contains("--key"), "{error}");

    let task = cluster.finished(&first, WITHIN).await;
    assert_eq!(
        (task.status, task.attempt),
        (TaskStatus::Success, 1),
        "{task:#?}"
    );
    let output: serde_json::Value =
        serde_json::from_slice(task.output.as_deref().unwrap()).unwrap();
    assert_eq!(output, json!({"greeting": "Hello, last edit!"}));
    assert!(
        task.enqueued_at.unwrap() >= task.created_at + 3_000,
        "{task:#?}"
    );
    let other = cluster.finished(&other, WITHIN).await;
    assert_eq!(other.status, TaskStatus::Success);
}

/// Fairness between keys, deployed from the CLI with its lookahead: a task
/// of one key scheduled behind a backlog of another starts long before the
/// backlog ends, the backlog's waiting tasks say they await their key's
/// turn, and every task ends.
pub async fn key_fairness(cluster: &Cluster) {
    const BACKLOG: usize = 1200;
    cluster.cli(&[
        "lambda",
        "deploy",
        "fair",
        samples::HELLO,
        "--key-fairness",
        "--key-weight",
        "gold=2",
        "--key-lookahead",
        "200",
    ]);
    let shown: serde_json::Value =
        serde_json::from_str(&cluster.cli(&["lambda", "get", "fair", "--json"])).unwrap();
    assert_eq!(
        shown["config"]["key_fairness"],
        json!({"weights": {"gold": 2}, "lookahead": 200})
    );
    let (code, error) = cluster.cli_failing(&[
        "lambda",
        "deploy",
        "fair",
        samples::HELLO,
        "--key-lookahead",
        "0",
    ]);
    assert_eq!(code, 2, "{error}");
    assert!(error.contains("--key-lookahead"), "{error}");
    let (code, error) = cluster.cli_failing(&[
        "lambda",
        "deploy",
        "fair",
        samples::HELLO,
        "--key-weight",
        "gold=0",
    ]);
    assert_eq!(code, 2, "{error}");
    assert!(error.contains("KEY=WEIGHT"), "{error}");

    let bulk = schedule_keyed(
        cluster,
        "fair",
        &["bulk"; BACKLOG],
        |_| json!({"name": "bulk"}),
    )
    .await;
    let urgent = schedule_keyed(cluster, "fair", &["urgent"], |_| json!({"name": "urgent"})).await;
    // The backlog's last task (they go oldest first, ties by id) waits
    // for its key's turn, and says so.
    let last = bulk.iter().max().unwrap();
    let shown = cluster.cli(&["task", "get", last]);
    assert!(
        shown.contains("key \"bulk\"'s turn (the lambda is fair"),
        "{shown}"
    );
    let urgent = cluster.finished(&urgent[0], WITHIN).await;
    assert_eq!(urgent.status, TaskStatus::Success, "{urgent:#?}");
    let mut after = 0;
    for id in &bulk {
        let task = cluster.finished(id, WITHIN).await;
        assert_eq!(task.status, TaskStatus::Success, "{task:#?}");
        after += usize::from(task.claimed_at > urgent.claimed_at);
    }
    // First come, first served, it would start after every one of them.
    assert!(
        after >= 300,
        "only {after} of the backlog's {BACKLOG} tasks started after the other key's"
    );
}

/// Schedules a task of `lambda` for each of `keys`, in one batch, each
/// with the payload `payload` makes of its key; their ids, in order.
async fn schedule_keyed(
    cluster: &Cluster,
    lambda: &str,
    keys: &[&str],
    payload: impl Fn(&str) -> serde_json::Value,
) -> Vec<String> {
    let requests = keys
        .iter()
        .map(|key| TaskRequest {
            lambda: lambda.into(),
            payload: payload(key).to_string().into_bytes(),
            key: Some((*key).into()),
            ..TaskRequest::default()
        })
        .collect();
    cluster
        .frontend
        .task_schedule_many(requests)
        .await
        .unwrap()
        .into_iter()
        .map(|task| task.id)
        .collect()
}

/// The id of the first of `lambda`'s tasks of `key` that `waft task list`
/// shows `waiting` (the words it prints), looked for until seen; fails
/// once `ended` of them have succeeded without one being seen.
async fn seen_waiting(
    cluster: &Cluster,
    lambda: &str,
    key: &str,
    waiting: &str,
    ended: usize,
) -> String {
    let seen = async {
        loop {
            let listed = cluster.cli(&["task", "list", "--lambda", lambda, "--key", key]);
            if let Some(line) = listed.lines().find(|line| line.contains(waiting)) {
                return line.split_whitespace().next().unwrap().to_owned();
            }
            let succeeded = listed
                .lines()
                .filter(|line| line.contains(" success "))
                .count();
            assert!(
                succeeded < ended,
                "{succeeded} of {key}'s tasks ended before one was seen {waiting}:\n{listed}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(WITHIN, seen).await.unwrap()
}
