//! Outbound HTTP against a real server on loopback: what a grant lets
//! through, everything it does not, every limit, and the fence — no request
//! survives, or starts after, the instance's stop.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use waft_core::{ByteSize, Grants, Limits, OutboundLimits};
use waft_runtime::{
    Execution, KillSwitch, LogSource, Outcome, PreparedLambda, RecordingHost, Runtime,
    RuntimeConfig, Sandbox, TaskInput,
};
use waft_sample_artifacts as samples;
use waft_testing::http::{HttpServer, Reply};

use crate::support;
use crate::support::output;

async fn webhook(runtime: &Runtime) -> PreparedLambda {
    support::prepare(runtime, samples::WEBHOOK).await
}

fn runtime() -> Runtime {
    Runtime::new(RuntimeConfig::default()).expect("runtime")
}

fn call(url: &str) -> TaskInput {
    support::task("01CALL", "webhook", &json!({"url": url, "body": {"n": 1}}))
}

fn granted(patterns: &[&str], limits: OutboundLimits) -> Sandbox {
    Sandbox {
        limits: Limits::default(),
        grants: Arc::new(Grants {
            outbound: patterns.iter().map(|p| p.parse().unwrap()).collect(),
            outbound_limits: limits,
            ..Grants::default()
        }),
        secrets: Arc::default(),
        ..Sandbox::default()
    }
}

async fn run(lambda: &PreparedLambda, url: &str, sandbox: &Sandbox) -> Execution {
    lambda
        .run(
            call(url),
            sandbox,
            Arc::new(RecordingHost::default()),
            &KillSwitch::new(),
        )
        .await
}

/// The platform's own log lines.
fn refusals(execution: &Execution) -> Vec<String> {
    execution
        .log
        .records
        .iter()
        .filter(|r| r.source == LogSource::Waft)
        .map(|r| r.message.clone())
        .collect()
}

fn fatal(execution: &Execution) -> &str {
    match &execution.outcome {
        Outcome::Fatal { message } => message,
        other => panic!(
            "expected a fatal failure, got {other:?}; log {:?}",
            execution.log
        ),
    }
}

fn retriable(execution: &Execution) -> &str {
    match &execution.outcome {
        Outcome::Retriable { message, .. } => message,
        other => panic!(
            "expected a retriable failure, got {other:?}; log {:?}",
            execution.log
        ),
    }
}

#[tokio::test]
async fn a_granted_destination_is_reached_with_a_stable_idempotency_key() {
    let server = HttpServer::start(|_| Reply::status(200, "thanks")).await;
    let runtime = runtime();
    let lambda = webhook(&runtime).await;
    let sandbox = granted(&[&server.url()], OutboundLimits::default());
    let execution = run(&lambda, &format!("{}/hook", server.url()), &sandbox).await;
    let answer = output(&execution);
    assert_eq!(answer["status"], 200);
    assert_eq!(answer["body"], "thanks");
    // A second attempt of the same task sends the same key.
    run(&lambda, &format!("{}/hook", server.url()), &sandbox).await;
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].method, "POST");
    assert_eq!(requests[0].path, "/hook");
    assert_eq!(requests[0].body, br#"{"n":1}"#);
    assert_eq!(requests[0].header("idempotency-key"), Some("waft-01CALL-0"));
    assert_eq!(
        requests[1].header("idempotency-key"),
        requests[0].header("idempotency-key")
    );
    assert_eq!(execution.outbound.len(), 1);
    assert_eq!(execution.outbound[0].host, "127.0.0.1");
    assert_eq!(execution.outbound[0].outcome, "2xx");
}

#[tokio::test]
async fn variables_reach_the_lambda_and_nothing_else_does() {
    let server = HttpServer::start(|_| Reply::status(200, "")).await;
    let runtime = runtime();
    let lambda = webhook(&runtime).await;
    let mut sandbox = granted(&[&server.url()], OutboundLimits::default());
    Arc::get_mut(&mut sandbox.grants)
        .unwrap()
        .env
        .insert("SOURCE".into(), "billing".into());
    output(&run(&lambda, &server.url(), &sandbox).await);
    // Another lambda's variables are not this one's.
    output(
        &run(
            &lambda,
            &server.url(),
            &granted(&[&server.url()], OutboundLimits::default()),
        )
        .await,
    );
    let requests = server.requests();
    assert_eq!(requests[0].header("x-waft-source"), Some("billing"));
    assert_eq!(requests[1].header("x-waft-source"), None);
    assert_eq!(requests[1].header("authorization"), None);
}

#[tokio::test]
async fn secrets_are_served_and_never_echoed() {
    let server = HttpServer::start(|request| {
        // The server echoes what it was sent, token included.
        Reply::status(200, request.header("authorization").unwrap_or("none"))
    })
    .await;
    let runtime = runtime();
    let lambda = webhook(&runtime).await;
    let sandbox = Sandbox {
        secrets: Arc::new(vec![("WEBHOOK_TOKEN".into(), "tok-3f9a1c77".into())]),
        ..granted(&[&server.url()], OutboundLimits::default())
    };
    let execution = run(&lambda, &server.url(), &sandbox).await;
    // The token went out to the granted destination...
    assert_eq!(
        server.requests()[0].header("authorization"),
        Some("Bearer tok-3f9a1c77")
    );
    // ...and what came back into the output is redacted.
    let answer = output(&execution);
    assert_eq!(answer["body"], "Bearer [redacted]");
}

#[tokio::test]
async fn anything_not_granted_is_refused_before_any_io_and_logged() {
    let server = HttpServer::start(|_| Reply::status(200, "")).await;
    let runtime = runtime();
    let lambda = webhook(&runtime).await;

    // No grant at all.
    let execution = run(&lambda, &server.url(), &Sandbox::default()).await;
    assert!(fatal(&execution).contains("refused"));
    let log = refusals(&execution);
    assert!(
        log[0].contains("granted no network")
            && log[0].contains(&format!("--allow-outbound {}", server.url())),
        "{log:?}"
    );

    // Another port of the same host.
    let other = granted(&["http://127.0.0.1:1"], OutboundLimits::default());
    let execution = run(&lambda, &server.url(), &other).await;
    fatal(&execution);
    assert!(
        refusals(&execution)[0].contains("is not on the lambda's allow-list"),
        "{:?}",
        execution.log
    );

    // A name on the list that resolves to loopback.
    let by_name = format!("http://localhost:{}", server.port());
    let execution = run(
        &lambda,
        &by_name,
        &granted(&[&by_name], OutboundLimits::default()),
    )
    .await;
    fatal(&execution);
    let log = refusals(&execution);
    assert!(
        log[0].contains("what localhost resolves to") && log[0].contains("not a public address"),
        "{log:?}"
    );

    // Everything granted, but not the inside: loopback and the metadata
    // address stay out of reach.
    let everything = granted(&["*://*:*"], OutboundLimits::default());
    for url in [
        server.url(),
        "http://169.254.169.254/latest/meta-data".into(),
    ] {
        let execution = run(&lambda, &url, &everything).await;
        fatal(&execution);
        assert!(
            refusals(&execution)[0].contains("not a public address"),
            "{url}: {:?}",
            execution.log
        );
    }
    assert!(server.requests().is_empty(), "{:?}", server.requests());
}

#[tokio::test]
async fn each_redirect_is_checked_like_a_request() {
    let outside = HttpServer::start(|_| Reply::status(200, "should not be reached")).await;
    let target = format!("{}/stolen", outside.url());
    let inside = HttpServer::start(move |_| Reply::redirect(&target)).await;
    let runtime = runtime();
    let lambda = webhook(&runtime).await;
    let execution = run(
        &lambda,
        &inside.url(),
        &granted(&[&inside.url()], OutboundLimits::default()),
    )
    .await;
    fatal(&execution);
    assert_eq!(inside.requests().len(), 1);
    assert!(outside.requests().is_empty());
    assert!(
        refusals(&execution)[0].contains(&outside.url()),
        "{:?}",
        execution.log
    );

    // The request budget counts redirects too.
    let hop = HttpServer::start(|request| {
        if request.path == "/again" {
            Reply::status(200, "")
        } else {
            Reply::redirect("/again")
        }
    })
    .await;
    let one = OutboundLimits {
        max_requests: 1,
        ..OutboundLimits::default()
    };
    let execution = run(&lambda, &hop.url(), &granted(&[&hop.url()], one)).await;
    fatal(&execution);
    assert_eq!(hop.requests().len(), 1);
    assert!(
        refusals(&execution)[0].contains("already sent its 1 requests"),
        "{:?}",
        execution.log
    );
}

#[tokio::test]
async fn slow_servers_hit_their_timeouts() {
    let silent = HttpServer::start(|_| Reply::Silence {
        for_: Duration::from_secs(10),
    })
    .await;
    let trickle = HttpServer::start(|_| Reply::Stream {
        chunk: b"x".to_vec(),
        every: Duration::from_secs(2),
        count: Some(3),
    })
    .await;
    let runtime = runtime();
    let lambda = webhook(&runtime).await;
    let short = OutboundLimits {
        first_byte_timeout: Duration::from_millis(300),
        between_bytes_timeout: Duration::from_millis(300),
        ..OutboundLimits::default()
    };
    for server in [&silent, &trickle] {
        let started = Instant::now();
        let execution = run(&lambda, &server.url(), &granted(&[&server.url()], short)).await;
        assert!(
            retriable(&execution).contains("timed out"),
            "{:?}",
            execution.outcome
        );
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }

    // The task's own deadline bounds every wait too.
    let sandbox = Sandbox {
        limits: Limits {
            timeout: Duration::from_millis(500),
            ..Limits::default()
        },
        ..granted(&[&silent.url()], OutboundLimits::default())
    };
    let started = Instant::now();
    let execution = run(&lambda, &silent.url(), &sandbox).await;
    assert!(
        matches!(
            execution.outcome,
            Outcome::LimitExceeded { .. } | Outcome::Retriable { .. }
        ),
        "{:?}",
        execution.outcome
    );
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn a_server_that_never_accepts_hits_the_connect_timeout() {
    // A listener whose accept queue is full and never drained: the kernel
    // drops further handshakes, so a connect waits until it gives up.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..4 {
        let connect = tokio::net::TcpStream::connect(addr);
        if let Ok(Ok(stream)) = tokio::time::timeout(Duration::from_millis(200), connect).await {
            fillers.push(stream);
        }
    }
    let url = format!("http://{addr}");
    let runtime = runtime();
    let lambda = webhook(&runtime).await;
    let limits = OutboundLimits {
        connect_timeout: Duration::from_millis(300),
        ..OutboundLimits::default()
    };
    let started = Instant::now();
    let execution = run(&lambda, &url, &granted(&[&url], limits)).await;
    let message = retriable(&execution);
    assert!(
        message.contains("timed out") || message.contains("timeout"),
        "{message}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(execution.outbound[0].outcome, "failed");
    drop(listener);
}

#[tokio::test]
async fn a_response_over_the_limit_is_cut_off() {
    let declared = HttpServer::start(|_| Reply::Answer {
        status: 200,
        headers: Vec::new(),
        body: vec![b'x'; 2 << 20],
    })
    .await;
    let streamed = HttpServer::start(|_| Reply::Stream {
        chunk: vec![b'y'; 64 << 10],
        every: Duration::from_millis(1),
        count: Some(40),
    })
    .await;
    let runtime = runtime();
    let lambda = webhook(&runtime).await;
    let one_mib = OutboundLimits {
        max_response: ByteSize::mib(1),
        ..OutboundLimits::default()
    };
    for (server, says) in [
        (&declared, "sent 2097152 bytes"),
        (&streamed, "more than the limit"),
    ] {
        let execution = run(&lambda, &server.url(), &granted(&[&server.url()], one_mib)).await;
        assert!(
            retriable(&execution).contains("too large"),
            "{:?}",
            execution.outcome
        );
        assert!(
            refusals(&execution).iter().any(|line| line.contains(says)),
            "{:?}",
            execution.log
        );
    }
}

#[tokio::test]
async fn a_stopped_instance_drops_its_requests_and_starts_none() {
    let server = HttpServer::start(|_| Reply::Stream {
        chunk: b"tick".to_vec(),
        every: Duration::from_millis(50),
        count: None,
    })
    .await;
    let runtime = runtime();
    let lambda = webhook(&runtime).await;
    let sandbox = granted(&[&server.url()], OutboundLimits::default());
    let kill = KillSwitch::new();
    let running = {
        let (kill, url, lambda) = (kill.clone(), server.url(), lambda.clone());
        tokio::spawn(async move {
            lambda
                .run(
                    call(&url),
                    &sandbox,
                    Arc::new(RecordingHost::default()),
                    &kill,
                )
                .await
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.requests().is_empty() {
        assert!(Instant::now() < deadline, "the request never arrived");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let killed_at = Instant::now();
    kill.kill("lease lost");
    let execution = running.await.unwrap();
    assert!(
        matches!(execution.outcome, Outcome::Killed { .. }),
        "{:?}",
        execution.outcome
    );
    // The server sees the connection drop within moments of the kill.
    let deadline = Instant::now() + Duration::from_secs(2);
    let dropped = loop {
        if let Some(at) = server.connections().iter().find_map(|c| c.dropped_early) {
            break at;
        }
        assert!(
            Instant::now() < deadline,
            "the connection outlived the instance"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(dropped.duration_since(killed_at) < Duration::from_secs(1));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(server.requests().len(), 1, "a request after the stop");
}

#[tokio::test]
async fn https_is_verified_against_the_roots_and_the_configured_ca() {
    let server = HttpServer::start_tls(|_| Reply::status(200, "secure")).await;
    let trusting = Runtime::new(RuntimeConfig {
        outbound_ca: server.ca_file().map(ToOwned::to_owned),
        ..RuntimeConfig::default()
    })
    .unwrap();
    // The certificate names 127.0.0.1, so the pattern must name it too.
    let sandbox = granted(&[&server.url()], OutboundLimits::default());
    let lambda = webhook(&trusting).await;
    let execution = run(&lambda, &server.url(), &sandbox).await;
    assert_eq!(output(&execution)["body"], "secure");

    let lambda = webhook(&runtime()).await;
    let execution = run(&lambda, &server.url(), &sandbox).await;
    retriable(&execution);
    assert_eq!(
        server.requests().len(),
        1,
        "an unverified server got a request"
    );
}
