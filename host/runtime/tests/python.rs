//! Lambdas written in Python (componentize-py, the Python SDK) run like
//! any other: their output, log and failures; their HTTP calls, grants,
//! configuration and secrets.

use std::sync::Arc;
use std::time::SystemTime;

use serde_json::{Value, json};
use waft_core::{Grants, Limits};
use waft_runtime::{
    KillSwitch, LogSource, Outcome, RecordingHost, Runtime, RuntimeConfig, Sandbox, TaskInput,
};
use waft_sample_artifacts as samples;
use waft_testing::http::{HttpServer, Reply};

fn task(payload: &[u8]) -> TaskInput {
    TaskInput {
        id: "01PY".into(),
        lambda: "hello-py".into(),
        collection: "default".into(),
        priority: 0,
        attempt: 2,
        scheduled_at: SystemTime::now(),
        payload: payload.to_vec(),
    }
}

#[tokio::test]
async fn a_python_lambda_answers_logs_and_fails_like_any_other() {
    let Some(path) = samples::PYTHON_HELLO else {
        // The build script fails under CI=true instead.
        eprintln!("skipping: componentize-py is not installed (run scripts/setup)");
        return;
    };
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let lambda = runtime
        .prepare(&std::fs::read(path).unwrap())
        .await
        .expect("a Python component prepares");
    let run = |payload: &'static [u8]| {
        let lambda = lambda.clone();
        async move {
            lambda
                .run(
                    task(payload),
                    &Sandbox::default(),
                    Arc::new(RecordingHost::default()),
                    &KillSwitch::new(),
                )
                .await
        }
    };

    let execution = run(br#"{"name":"Ada"}"#).await;
    let Outcome::Success {
        output: Some(output),
    } = &execution.outcome
    else {
        panic!("{:?}; log {:?}", execution.outcome, execution.log);
    };
    let output: Value = serde_json::from_slice(output).unwrap();
    assert_eq!(output, json!({"greeting": "Hello, Ada!"}));
    let record = &execution.log.records[0];
    assert_eq!(record.source, LogSource::Lambda(waft_runtime::Level::Info));
    assert_eq!(record.message, "greeted on attempt 2");
    assert_eq!(record.fields, [("name".to_owned(), "Ada".to_owned())]);

    // Bad JSON raises inside the function: a retriable failure saying why.
    let execution = run(b"{not json").await;
    match &execution.outcome {
        Outcome::Retriable { message, .. } => {
            assert!(message.contains("JSONDecodeError"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_python_webhook_calls_what_it_is_granted_with_its_secret_and_judges_the_answer() {
    let Some(path) = samples::PYTHON_WEBHOOK else {
        eprintln!("skipping: componentize-py is not installed (run scripts/setup)");
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
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let lambda = runtime
        .prepare(&std::fs::read(path).unwrap())
        .await
        .expect("a Python component prepares");
    let mut grants = Grants {
        outbound: vec![server.url().parse().unwrap()],
        ..Grants::default()
    };
    grants.env.insert("SOURCE".into(), "billing".into());
    let sandbox = Sandbox {
        limits: Limits::default(),
        grants: Arc::new(grants),
        secrets: Arc::new(vec![("WEBHOOK_TOKEN".into(), "tok-5be2d0c1".into())]),
    };
    let run = |url: String, sandbox: Sandbox| {
        let lambda = lambda.clone();
        async move {
            let payload = json!({"url": url, "body": {"n": 1}}).to_string();
            lambda
                .run(
                    task(payload.as_bytes()),
                    &sandbox,
                    Arc::new(RecordingHost::default()),
                    &KillSwitch::new(),
                )
                .await
        }
    };

    // Granted: the request carries the token, the variable and a key that
    // a second attempt repeats; the echoed token comes back redacted.
    for _ in 0..2 {
        let execution = run(format!("{}/hook", server.url()), sandbox.clone()).await;
        let Outcome::Success {
            output: Some(output),
        } = &execution.outcome
        else {
            panic!("{:?}; log {:?}", execution.outcome, execution.log);
        };
        let output: Value = serde_json::from_slice(output).unwrap();
        assert_eq!(output["status"], 200);
        assert_eq!(output["body"], "Bearer [redacted]");
    }
    let requests = server.requests();
    assert_eq!(requests[0].method, "POST");
    assert_eq!(requests[0].body, br#"{"n": 1}"#);
    assert_eq!(
        requests[0].header("authorization"),
        Some("Bearer tok-5be2d0c1")
    );
    assert_eq!(requests[0].header("x-waft-source"), Some("billing"));
    assert_eq!(requests[0].header("idempotency-key"), Some("waft-01PY-0"));
    assert_eq!(
        requests[1].header("idempotency-key"),
        requests[0].header("idempotency-key")
    );

    // 503 with Retry-After: retriable, after the server's delay.
    let execution = run(format!("{}/busy", server.url()), sandbox.clone()).await;
    assert!(
        matches!(
            &execution.outcome,
            Outcome::Retriable { retry_after: Some(after), .. } if after.as_secs() == 7
        ),
        "{:?}",
        execution.outcome
    );
    // 404: fatal, with the server's answer.
    let execution = run(format!("{}/gone", server.url()), sandbox.clone()).await;
    assert!(
        matches!(&execution.outcome, Outcome::Fatal { message } if message.contains("no such hook")),
        "{:?}",
        execution.outcome
    );

    // Not granted: refused before any I/O, fatal, and the log says why.
    let seen = server.requests().len();
    let execution = run(format!("{}/hook", server.url()), Sandbox::default()).await;
    assert!(
        matches!(&execution.outcome, Outcome::Fatal { message } if message.contains("refused")),
        "{:?}",
        execution.outcome
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
