//! Lambdas written in Python (componentize-py, `sdk/python`) and in
//! JavaScript (componentize-js, `sdk/js`) run like any other: their output,
//! log and failures; their HTTP calls, grants, configuration and secrets.
//! Each language's `hello` and `webhook` samples meet the same checks, and
//! a retry of each language's webhook is answered from its journal.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use waft_core::model::{ChildEnd, JournalEntry, Wait};
use waft_core::{Grants, Limits, TaskStatus};
use waft_runtime::{
    Execution, LogSource, Outcome, PreparedLambda, RecordingHost, Runtime, RuntimeConfig, Sandbox,
    TaskInput,
};
use waft_sample_artifacts as samples;
use waft_testing::http::{HttpServer, Reply};

use crate::support;

/// The sample at `path`, prepared; `None` (after saying so) when its
/// language's tool is not installed — the samples' build fails instead
/// under CI=true.
async fn prepare(path: Option<&str>, tool: &str) -> Option<PreparedLambda> {
    let Some(path) = path else {
        eprintln!("skipping: {tool} is not installed (run scripts/setup)");
        return None;
    };
    // The module's tests share one compile cache, kept between runs: these
    // components are large, and compiling each for every test was most of
    // what the module cost. One prepares at a time, so that a component is
    // compiled once and the tests after it load it (wasmtime compiles on
    // every core anyway).
    static PREPARING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _one_at_a_time = PREPARING.lock().await;
    let config = RuntimeConfig {
        cache_dir: Some(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("compiled-samples")),
        ..RuntimeConfig::default()
    };
    let runtime = Runtime::new(config).unwrap();
    let lambda = runtime
        .prepare(&std::fs::read(path).unwrap())
        .await
        .expect("the component prepares");
    Some(lambda)
}

/// Runs task `id` (attempt 2) with `payload`.
async fn run(lambda: &PreparedLambda, id: &str, payload: &[u8], sandbox: &Sandbox) -> Execution {
    run_from(lambda, id, payload, sandbox, &mut Vec::new()).await
}

/// [`run`], from `journal`, which it brings to what the execution left.
async fn run_from(
    lambda: &PreparedLambda,
    id: &str,
    payload: &[u8],
    sandbox: &Sandbox,
    journal: &mut Vec<JournalEntry>,
) -> Execution {
    let host = Arc::new(RecordingHost::default());
    run_on(lambda, id, payload, sandbox, journal, &host).await
}

/// [`run_from`] with `host` as the platform (the signals it was sent).
async fn run_on(
    lambda: &PreparedLambda,
    id: &str,
    payload: &[u8],
    sandbox: &Sandbox,
    journal: &mut Vec<JournalEntry>,
    host: &Arc<RecordingHost>,
) -> Execution {
    let task = TaskInput {
        id: id.into(),
        lambda: "sample".into(),
        collection: "default".into(),
        priority: 0,
        attempt: 2,
        scheduled_at: SystemTime::now(),
        payload: payload.to_vec(),
        journal: Vec::new(),
    };
    support::run_journaled_on(lambda, task, sandbox, journal, host.clone()).await
}

/// A retry of a webhook that succeeded is answered from its journal: the
/// same answer, no second request, and the secret it read nowhere in it.
async fn webhook_replays(lambda: &PreparedLambda) {
    let server = HttpServer::start(|_| Reply::status(200, "noted")).await;
    let mut grants = Grants {
        outbound: vec![server.url().parse().unwrap()],
        ..Grants::default()
    };
    grants.env.insert("SOURCE".into(), "billing".into());
    let sandbox = Sandbox {
        grants: Arc::new(grants),
        secrets: Arc::new(vec![("WEBHOOK_TOKEN".into(), "tok-5be2d0c1".into())]),
        ..Sandbox::default()
    };
    let call = json!({"url": format!("{}/hook", server.url())}).to_string();
    let mut journal = Vec::new();
    let first = output(&run_from(lambda, "01RE", call.as_bytes(), &sandbox, &mut journal).await);
    let recorded = journal.clone();
    assert!(
        recorded
            .iter()
            .any(|e| e.call == "wasi:http/outgoing-handler.handle" && e.outside),
        "{recorded:?}"
    );
    let second = run_from(lambda, "01RE", call.as_bytes(), &sandbox, &mut journal).await;
    assert_eq!(second.replayed as usize, recorded.len());
    assert_eq!(output(&second), first);
    assert_eq!(server.requests().len(), 1, "the retry sent nothing");
    for entry in &journal {
        let clear = |bytes: &[u8]| bytes.windows(12).any(|w| w == b"tok-5be2d0c1");
        assert!(
            !clear(&entry.answer) && !clear(entry.summary.as_bytes()),
            "{entry:?}"
        );
    }
}

fn output(execution: &Execution) -> Value {
    match &execution.outcome {
        Outcome::Success {
            output: Some(bytes),
        } => serde_json::from_slice(bytes).unwrap(),
        other => panic!("{other:?}; log {:?}", execution.log),
    }
}

/// `hello` greets, logs with fields, and a payload that is not JSON is a
/// retriable failure naming the language's error (`bad_json`).
async fn hello_answers_logs_and_fails(lambda: &PreparedLambda, bad_json: &str) {
    let execution = run(lambda, "01HI", br#"{"name":"Ada"}"#, &Sandbox::default()).await;
    assert_eq!(output(&execution), json!({"greeting": "Hello, Ada!"}));
    let record = &execution.log.records[0];
    assert_eq!(record.source, LogSource::Lambda(waft_runtime::Level::Info));
    assert_eq!(record.message, "greeted on attempt 2");
    assert_eq!(record.fields, [("name".to_owned(), "Ada".to_owned())]);

    // Bad JSON raises inside the function: a retriable failure saying why.
    let execution = run(lambda, "01HI", b"{not json", &Sandbox::default()).await;
    match &execution.outcome {
        Outcome::Retriable { message, .. } => {
            assert!(message.contains(bad_json), "{message}")
        }
        other => panic!("{other:?}"),
    }
}

/// `webhook` against a real server: granted, it sends the secret, the
/// variable and a key a second attempt repeats (the body as the language
/// encodes `{"n":1}`: `sent`), and the echoed secret comes back redacted;
/// 503 with Retry-After is retriable after it, 404 fatal; not granted,
/// nothing reaches the server, the log says why, and the outcome is what
/// `refused` accepts.
async fn webhook_calls_what_it_is_granted(
    lambda: &PreparedLambda,
    sent: &[u8],
    refused: impl Fn(&Outcome) -> bool,
) {
    let server = HttpServer::start(|request| match request.path.as_str() {
        "/busy" => Reply::Answer {
            status: 503,
            headers: vec![("retry-after".into(), "7".into())],
            body: Vec::new(),
        },
        "/gone" => Reply::status(404, "no such hook"),
        _ => Reply::status(200, request.header("authorization").unwrap_or("none")),
    })
    .await;
    let mut grants = Grants {
        outbound: vec![server.url().parse().unwrap()],
        ..Grants::default()
    };
    grants.env.insert("SOURCE".into(), "billing".into());
    let sandbox = Sandbox {
        limits: Limits::default(),
        grants: Arc::new(grants),
        secrets: Arc::new(vec![("WEBHOOK_TOKEN".into(), "tok-5be2d0c1".into())]),
        ..Sandbox::default()
    };
    let call = |path: &str| {
        json!({"url": format!("{}{path}", server.url()), "body": {"n": 1}})
            .to_string()
            .into_bytes()
    };

    for _ in 0..2 {
        let answer = output(&run(lambda, "01WH", &call("/hook"), &sandbox).await);
        assert_eq!(answer["status"], 200);
        assert_eq!(answer["body"], "Bearer [redacted]");
    }
    let requests = server.requests();
    assert_eq!(requests[0].method, "POST");
    assert_eq!(requests[0].body, sent);
    assert_eq!(
        requests[0].header("authorization"),
        Some("Bearer tok-5be2d0c1")
    );
    assert_eq!(requests[0].header("x-waft-source"), Some("billing"));
    assert_eq!(requests[0].header("idempotency-key"), Some("waft-01WH-0"));
    assert_eq!(
        requests[1].header("idempotency-key"),
        requests[0].header("idempotency-key")
    );

    let execution = run(lambda, "01WH", &call("/busy"), &sandbox).await;
    assert!(
        matches!(
            &execution.outcome,
            Outcome::Retriable { retry_after: Some(after), .. } if after.as_secs() == 7
        ),
        "{:?}",
        execution.outcome
    );
    let execution = run(lambda, "01WH", &call("/gone"), &sandbox).await;
    assert!(
        matches!(&execution.outcome, Outcome::Fatal { message } if message.contains("no such hook")),
        "{:?}",
        execution.outcome
    );

    let seen = server.requests().len();
    let execution = run(lambda, "01WH", &call("/hook"), &Sandbox::default()).await;
    assert!(
        refused(&execution.outcome),
        "{:?}; log {:?}",
        execution.outcome,
        execution.log
    );
    assert!(
        execution
            .log
            .records
            .iter()
            .any(|r| r.source == LogSource::Waft && r.message.contains("--allow-outbound")),
        "{:?}",
        execution.log
    );
    assert_eq!(server.requests().len(), seen);
}

#[tokio::test]
async fn a_python_lambda_answers_logs_and_fails_like_any_other() {
    if let Some(lambda) = prepare(samples::PYTHON_HELLO, "componentize-py").await {
        hello_answers_logs_and_fails(&lambda, "JSONDecodeError").await;
    }
}

#[tokio::test]
async fn a_python_webhook_calls_what_it_is_granted_with_its_secret_and_judges_the_answer() {
    let Some(lambda) = prepare(samples::PYTHON_WEBHOOK, "componentize-py").await else {
        return;
    };
    // `waft_http` tells a refusal apart: fatal, the grant is missing.
    webhook_calls_what_it_is_granted(
        &lambda,
        br#"{"n": 1}"#,
        |outcome| matches!(outcome, Outcome::Fatal { message } if message.contains("refused")),
    )
    .await;
}

#[tokio::test]
async fn a_javascript_lambda_answers_logs_and_fails_like_any_other() {
    let Some(lambda) = prepare(samples::JS_HELLO, "componentize-js").await else {
        return;
    };
    // Built without HTTP, it imports none: it deploys without a grant.
    let imports = lambda.imports();
    assert!(
        !imports.iter().any(|i| i.starts_with("wasi:http/")),
        "{imports:?}"
    );
    hello_answers_logs_and_fails(&lambda, "SyntaxError").await;
}

#[tokio::test]
async fn a_javascript_webhook_fetches_what_it_is_granted_with_its_secret() {
    let Some(lambda) = prepare(samples::JS_WEBHOOK, "componentize-js").await else {
        return;
    };
    // `fetch` rejects a refusal like a network failure: retriable. The
    // request's body was being streamed: the lambda still gets an answer it
    // can handle (a rejected `fetch`), not a trap.
    webhook_calls_what_it_is_granted(&lambda, br#"{"n":1}"#, |outcome| {
        matches!(outcome, Outcome::Retriable { message, .. } if message.contains("NetworkError"))
    })
    .await;
}

/// The webhook sample in each language, with the tool that builds it.
const WEBHOOKS: [(Option<&str>, &str); 2] = [
    (samples::PYTHON_WEBHOOK, "componentize-py"),
    (samples::JS_WEBHOOK, "componentize-js"),
];

/// A sandbox granted `server`, suspending waits past 300 ms.
fn suspending_to(server: &HttpServer) -> Sandbox {
    let grants = Grants {
        outbound: vec![server.url().parse().unwrap()],
        ..Grants::default()
    };
    Sandbox {
        grants: Arc::new(grants),
        suspend_after: Some(std::time::Duration::from_millis(300)),
        ..Sandbox::default()
    }
}

#[tokio::test]
async fn python_and_javascript_webhooks_replay_from_their_journals() {
    for (path, tool) in WEBHOOKS {
        if let Some(lambda) = prepare(path, tool).await {
            webhook_replays(&lambda).await;
        }
    }
}

/// `waft.sleep` in Python and JavaScript (`time.sleep`, `setTimeout`)
/// suspends past `suspend_after`, and the next execution goes on after the
/// wait without calling the server again.
#[tokio::test]
async fn python_and_javascript_sleeps_suspend_and_resume() {
    for (path, tool) in WEBHOOKS {
        if let Some(lambda) = prepare(path, tool).await {
            sleep_suspends(&lambda, tool).await;
        }
    }
}

async fn sleep_suspends(lambda: &PreparedLambda, tool: &str) {
    let server = HttpServer::start(|_| Reply::status(200, "noted")).await;
    let sandbox = suspending_to(&server);
    let call = json!({"url": format!("{}/hook", server.url()), "sleep_ms": 1500}).to_string();
    let mut journal = Vec::new();
    let first = run_from(lambda, "01ZZ", call.as_bytes(), &sandbox, &mut journal).await;
    let Outcome::Suspended { until, .. } = first.outcome else {
        panic!("{tool}: {:?}; log {:?}", first.outcome, first.log);
    };
    assert!(
        first.duration < std::time::Duration::from_millis(1200),
        "{tool}"
    );
    if let Ok(left) = until.duration_since(SystemTime::now()) {
        tokio::time::sleep(left + std::time::Duration::from_millis(5)).await;
    }
    let second = run_from(lambda, "01ZZ", call.as_bytes(), &sandbox, &mut journal).await;
    assert_eq!(output(&second)["status"], 200, "{tool}");
    assert_eq!(server.requests().len(), 1, "{tool}: the POST was made once");
}

/// A Python or JavaScript lambda waiting for a signal is suspended until it
/// is sent, then takes its payload; a replay returns the same.
#[tokio::test]
async fn python_and_javascript_wait_for_signals() {
    for (path, tool) in WEBHOOKS {
        if let Some(lambda) = prepare(path, tool).await {
            signal_suspends(&lambda, tool).await;
        }
    }
}

async fn signal_suspends(lambda: &PreparedLambda, tool: &str) {
    let server = HttpServer::start(|_| Reply::status(200, "noted")).await;
    let sandbox = suspending_to(&server);
    let call = json!({
        "url": format!("{}/hook", server.url()),
        "signal": "approved",
        "signal_ms": 600_000,
    })
    .to_string();
    let host = Arc::new(RecordingHost::default());
    let mut journal = Vec::new();
    let first = run_on(
        lambda,
        "01SIG",
        call.as_bytes(),
        &sandbox,
        &mut journal,
        &host,
    )
    .await;
    let Outcome::Suspended { wait, .. } = &first.outcome else {
        panic!("{tool}: {:?}; log {:?}", first.outcome, first.log);
    };
    assert_eq!(
        wait,
        &Wait::Signal {
            name: "approved".into(),
            taken: 0
        },
        "{tool}"
    );
    host.send_signal("approved", "by Ada");
    let second = run_on(
        lambda,
        "01SIG",
        call.as_bytes(),
        &sandbox,
        &mut journal,
        &host,
    )
    .await;
    assert_eq!(output(&second)["signal"], "by Ada", "{tool}");
    assert_eq!(server.requests().len(), 1, "{tool}: the POST was made once");
    let forgetful = Arc::new(RecordingHost::default());
    let replayed = run_on(
        lambda,
        "01SIG",
        call.as_bytes(),
        &sandbox,
        &mut journal,
        &forgetful,
    )
    .await;
    assert_eq!(output(&replayed)["signal"], "by Ada", "{tool}");
}

#[tokio::test]
async fn python_and_javascript_gather_their_children() {
    let hellos = [
        (samples::PYTHON_HELLO, "componentize-py"),
        (samples::JS_HELLO, "componentize-js"),
    ];
    for (path, tool) in hellos {
        if let Some(lambda) = prepare(path, tool).await {
            gather(&lambda, tool).await;
        }
    }
}

async fn gather(lambda: &PreparedLambda, tool: &str) {
    let sandbox = Sandbox {
        suspend_after: Some(Duration::from_millis(300)),
        ..Sandbox::default()
    };
    let call = json!({"children": [{"lambda": "hello"}, {"lambda": "fatal"}]}).to_string();
    let host = Arc::new(RecordingHost::default());
    let mut journal = Vec::new();
    let first = run_on(
        lambda,
        "01FAN",
        call.as_bytes(),
        &sandbox,
        &mut journal,
        &host,
    )
    .await;
    let ids = vec!["local-child-1".to_owned(), "local-child-2".to_owned()];
    assert!(
        matches!(&first.outcome, Outcome::Suspended { wait: Wait::Children { ids: waited }, .. } if *waited == ids),
        "{tool}: {:?}; log {:?}",
        first.outcome,
        first.log
    );
    host.end_child(ChildEnd {
        id: ids[0].clone(),
        status: TaskStatus::Success,
        output: Some(b"hi".to_vec()),
        error: None,
    });
    host.end_child(ChildEnd {
        id: ids[1].clone(),
        status: TaskStatus::FatalFailure,
        output: None,
        error: Some("no".into()),
    });
    let second = run_on(
        lambda,
        "01FAN",
        call.as_bytes(),
        &sandbox,
        &mut journal,
        &host,
    )
    .await;
    assert_eq!(
        output(&second)["ends"],
        json!([
            {"id": ids[0], "status": "success", "output": "hi"},
            {"id": ids[1], "status": "fatal_failure", "output": ""},
        ]),
        "{tool}: log {:?}",
        second.log
    );
    assert_eq!(host.children_requested(), 2, "{tool}: scheduled once each");
}

/// Two requests in flight together (`Promise.all`): one answers and its
/// answer is journaled, then the other answers 503 and the lambda gives
/// up. The retry makes the failed one again, with the same idempotency key,
/// and never the answered one — whichever of them took the earlier place.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failure_among_concurrent_requests_is_made_again() {
    let Some(lambda) = prepare(samples::JS_GATHER, "componentize-js").await else {
        return;
    };
    for failing in ["/a", "/b"] {
        failure_after_an_answer(&lambda, failing).await;
    }
}

async fn failure_after_an_answer(lambda: &PreparedLambda, failing: &'static str) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Condvar, Mutex};
    // The failing request answers once the other's answer is journaled.
    let journaled = Arc::new((Mutex::new(false), Condvar::new()));
    let failed = AtomicBool::new(false);
    let gate = journaled.clone();
    let server = HttpServer::start(move |request| {
        if request.path != failing {
            return Reply::status(200, "ok");
        }
        let (done, ready) = &*gate;
        let wait = Duration::from_secs(30);
        drop(ready.wait_timeout_while(done.lock().unwrap(), wait, |done| !*done));
        if failed.swap(true, Ordering::SeqCst) {
            Reply::status(200, "ok")
        } else {
            Reply::status(503, "busy")
        }
    })
    .await;
    let other = if failing == "/a" { "/b" } else { "/a" };
    let host = Arc::new(RecordingHost::default());
    let watching = host.clone();
    let answered = format!("{}{other} ", server.url());
    let watcher = tokio::spawn(async move {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            let writes = watching.journal_writes();
            let mut entries = writes.iter().flat_map(|write| write.entries.iter());
            if entries.any(|entry| !entry.digest.is_empty() && entry.summary.contains(&answered)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let (done, ready) = &*journaled;
        *done.lock().unwrap() = true;
        ready.notify_all();
    });
    let urls = [format!("{}/a", server.url()), format!("{}/b", server.url())];
    let call = json!({ "urls": urls }).to_string();
    let sandbox = suspending_to(&server);
    let mut journal = Vec::new();
    let first = run_on(
        lambda,
        "01GATHER",
        call.as_bytes(),
        &sandbox,
        &mut journal,
        &host,
    )
    .await;
    watcher.await.unwrap();
    assert!(
        matches!(first.outcome, Outcome::Retriable { .. }),
        "{failing}: {:?}",
        first.outcome
    );
    let second = run_on(
        lambda,
        "01GATHER",
        call.as_bytes(),
        &sandbox,
        &mut journal,
        &host,
    )
    .await;
    assert_eq!(
        output(&second)["statuses"],
        json!([200, 200]),
        "{failing} made again"
    );
    let seen = |path: &str| -> Vec<_> {
        let requests = server.requests().into_iter();
        requests.filter(|r| r.path == path).collect()
    };
    assert_eq!(seen(other).len(), 1, "{other} answered: never made again");
    let again = seen(failing);
    assert_eq!(again.len(), 2, "{failing} failed: made again");
    assert_eq!(
        again[0].header("idempotency-key"),
        again[1].header("idempotency-key")
    );
}
