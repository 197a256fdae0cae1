//! Lambdas written in JavaScript (componentize-js, the JavaScript SDK) run
//! like any other: their output, log and failures; their `fetch` calls,
//! grants, configuration and secrets.

use std::sync::Arc;
use std::time::SystemTime;

use serde_json::{Value, json};
use waft_core::{Grants, Limits};
use waft_runtime::{
    Execution, KillSwitch, LogSource, Outcome, PreparedLambda, RecordingHost, Runtime,
    RuntimeConfig, Sandbox, TaskInput,
};
use waft_sample_artifacts as samples;
use waft_testing::http::{HttpServer, Reply};

fn task(payload: &[u8]) -> TaskInput {
    TaskInput {
        id: "01JS".into(),
        lambda: "js".into(),
        collection: "default".into(),
        priority: 0,
        attempt: 2,
        scheduled_at: SystemTime::now(),
        payload: payload.to_vec(),
    }
}

async fn prepare(path: &str) -> PreparedLambda {
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    runtime
        .prepare(&std::fs::read(path).unwrap())
        .await
        .expect("a JavaScript component prepares")
}

async fn run(lambda: &PreparedLambda, payload: &[u8], sandbox: &Sandbox) -> Execution {
    lambda
        .run(
            task(payload),
            sandbox,
            Arc::new(RecordingHost::default()),
            &KillSwitch::new(),
        )
        .await
}

fn output(execution: &Execution) -> Value {
    match &execution.outcome {
        Outcome::Success {
            output: Some(bytes),
        } => serde_json::from_slice(bytes).unwrap(),
        other => panic!("{other:?}; log {:?}", execution.log),
    }
}

#[tokio::test]
async fn a_javascript_lambda_answers_logs_and_fails_like_any_other() {
    let Some(path) = samples::JS_HELLO else {
        // The build script fails under CI=true instead.
        eprintln!("skipping: componentize-js is not installed (run scripts/setup)");
        return;
    };
    let lambda = prepare(path).await;
    // Built without HTTP, it imports none: it deploys without a grant.
    let imports = lambda.imports();
    assert!(
        !imports.iter().any(|i| i.starts_with("wasi:http/")),
        "{imports:?}"
    );

    let execution = run(&lambda, br#"{"name":"Ada"}"#, &Sandbox::default()).await;
    assert_eq!(output(&execution), json!({"greeting": "Hello, Ada!"}));
    let record = &execution.log.records[0];
    assert_eq!(record.source, LogSource::Lambda(waft_runtime::Level::Info));
    assert_eq!(record.message, "greeted on attempt 2");
    assert_eq!(record.fields, [("name".to_owned(), "Ada".to_owned())]);

    // Bad JSON throws inside the function: a retriable failure saying why.
    let execution = run(&lambda, b"{not json", &Sandbox::default()).await;
    match &execution.outcome {
        Outcome::Retriable { message, .. } => {
            assert!(message.contains("SyntaxError"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_javascript_webhook_fetches_what_it_is_granted_with_its_secret() {
    let Some(path) = samples::JS_WEBHOOK else {
        eprintln!("skipping: componentize-js is not installed (run scripts/setup)");
        return;
    };
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
    let lambda = prepare(path).await;
    let mut grants = Grants {
        outbound: vec![server.url().parse().unwrap()],
        ..Grants::default()
    };
    grants.env.insert("SOURCE".into(), "billing".into());
    let sandbox = Sandbox {
        limits: Limits::default(),
        grants: Arc::new(grants),
        secrets: Arc::new(vec![("WEBHOOK_TOKEN".into(), "tok-js-82f1a0".into())]),
    };
    let call = |path: &str| {
        json!({"url": format!("{}{path}", server.url()), "body": {"n": 1}})
            .to_string()
            .into_bytes()
    };

    // Granted: token, variable and a key that a second attempt repeats;
    // the echoed token comes back redacted.
    for _ in 0..2 {
        let answer = output(&run(&lambda, &call("/hook"), &sandbox).await);
        assert_eq!(answer["status"], 200);
        assert_eq!(answer["body"], "Bearer [redacted]");
    }
    let requests = server.requests();
    assert_eq!(requests[0].method, "POST");
    assert_eq!(requests[0].body, br#"{"n":1}"#);
    assert_eq!(
        requests[0].header("authorization"),
        Some("Bearer tok-js-82f1a0")
    );
    assert_eq!(requests[0].header("x-waft-source"), Some("billing"));
    assert_eq!(requests[0].header("idempotency-key"), Some("waft-01JS-0"));
    assert_eq!(
        requests[1].header("idempotency-key"),
        requests[0].header("idempotency-key")
    );

    let execution = run(&lambda, &call("/busy"), &sandbox).await;
    assert!(
        matches!(
            &execution.outcome,
            Outcome::Retriable { retry_after: Some(after), .. } if after.as_secs() == 7
        ),
        "{:?}",
        execution.outcome
    );
    let execution = run(&lambda, &call("/gone"), &sandbox).await;
    assert!(
        matches!(&execution.outcome, Outcome::Fatal { message } if message.contains("no such hook")),
        "{:?}",
        execution.outcome
    );

    // Not granted: refused before any I/O, and the log says why. The
    // request's body was being streamed: the lambda still gets an answer
    // it can handle (a rejected `fetch`), not a trap.
    let seen = server.requests().len();
    let execution = run(&lambda, &call("/hook"), &Sandbox::default()).await;
    assert!(
        matches!(&execution.outcome, Outcome::Retriable { message, .. } if message.contains("NetworkError")),
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
