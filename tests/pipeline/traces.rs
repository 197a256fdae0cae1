//! Traces: a task's path — `schedule`, `enqueue`, `claim`, `execute` and
//! its outbound request — is one distributed trace, its client's, and a
//! child task's spans are in it too; the server the lambda calls gets the
//! request span's `traceparent`. Checked in each mode against a real OTLP
//! receiver on loopback (`waft_testing::OtlpReceiver`), to which every
//! process exports as to a collector.

use std::time::Duration;

use serde_json::json;
use waft_sample_artifacts as samples;
use waft_services::ClientApi;
use waft_store::TaskList;
use waft_testing::http::{HttpServer, Reply};
use waft_testing::{OtlpReceiver, ReceivedSpan};

use crate::support::{Cluster, Layout};

const WITHIN: Duration = Duration::from_secs(60);
const PRODUCER: i32 = 4;
const CONSUMER: i32 = 5;
const CLIENT: i32 = 3;

/// The settings that send a process's spans to `receiver`, promptly.
fn traced(receiver: &OtlpReceiver) -> Vec<(String, String)> {
    vec![
        ("WAFT_OTEL_ENDPOINT".into(), receiver.endpoint()),
        ("WAFT_OTEL_SERVICE_NAME".into(), "waft-test".into()),
        ("OTEL_BSP_SCHEDULE_DELAY".into(), "100".into()),
    ]
}

/// In `waft dev`: every role in one process.
pub async fn a_tasks_path_is_one_trace_in_dev() {
    let receiver = OtlpReceiver::start().await;
    let cluster = Cluster::dev_on_with(None, |_| {}, traced(&receiver)).await;
    follow(&cluster, &receiver).await;
}

/// In the distributed mode: each role a process of its own, exporting on
/// its own. `false` when this machine cannot run the mode.
pub async fn a_tasks_path_is_one_trace_across_processes() -> bool {
    let receiver = OtlpReceiver::start().await;
    // The layout's settings outlive the test binary's use of them.
    let env: &'static [(&'static str, &'static str)] = Box::leak(
        traced(&receiver)
            .into_iter()
            .map(|(k, v)| {
                (
                    &*Box::leak(k.into_boxed_str()),
                    &*Box::leak(v.into_boxed_str()),
                )
            })
            .collect(),
    );
    let Some(cluster) = Cluster::distributed_with(Layout {
        executors: 1,
        hsc_link: false,
        sqs_link: false,
        env,
    })
    .await
    else {
        return false;
    };
    follow(&cluster, &receiver).await;
    true
}

/// Schedules a `chain` task with a client's `traceparent`; it schedules a
/// `webhook` child that calls the test's HTTP server. Checks every span's
/// trace and parent.
async fn follow(cluster: &Cluster, receiver: &OtlpReceiver) {
    let server = HttpServer::start(|_| Reply::status(200, "received")).await;
    let url = server.url();
    cluster
        .deploy("webhook", samples::WEBHOOK, |c| {
            c.grants.outbound = vec![url.parse().unwrap()]
        })
        .await;
    cluster
        .deploy("chain", samples::CHAIN, |c| {
            c.allowed_children = vec!["webhook".into()]
        })
        .await;

    let trace_id = format!("{:032x}", fastrand::u128(1..));
    let client_span = format!("{:016x}", fastrand::u64(1..));
    let payload =
        json!({"children": [{"lambda": "webhook", "payload": {"url": format!("{url}/hook")}}]});
    let traceparent = format!("00-{trace_id}-{client_span}-01");
    let parent = cluster
        .cli(&[
            "task",
            "schedule",
            "chain",
            "--payload",
            &payload.to_string(),
            "--traceparent",
            &traceparent,
        ])
        .trim()
        .to_owned();
    let task = cluster.finished(&parent, WITHIN).await;
    assert_eq!(task.status, waft_core::TaskStatus::Success, "{task:#?}");
    let children = cluster
        .frontend
        .task_list(TaskList {
            parent_id: Some(parent.clone()),
            ..TaskList::default()
        })
        .await
        .unwrap();
    assert_eq!(children.len(), 1, "{children:#?}");
    let child = children[0].id.clone();
    let done = cluster.finished(&child, WITHIN).await;
    assert_eq!(done.status, waft_core::TaskStatus::Success, "{done:#?}");

    // Spans arrive as each process's batch goes out.
    let steps = ["schedule", "enqueue", "claim", "execute"];
    let spans = receiver
        .until(WITHIN, |spans| {
            let of = |task: &str, name: &str| find(spans, &trace_id, task, name).is_some();
            steps.iter().all(|s| of(&parent, s) && of(&child, s))
                && spans
                    .iter()
                    .any(|s| s.trace_id == trace_id && s.kind == CLIENT)
        })
        .await;
    let step = |task: &str, name: &str| find(&spans, &trace_id, task, name).unwrap();

    // The parent's path hangs from the client's span…
    let schedule = step(&parent, "schedule");
    assert_eq!(schedule.parent_span_id, client_span, "{schedule:#?}");
    assert_eq!(schedule.kind, PRODUCER);
    assert_eq!(
        schedule.attribute("messaging.destination.name"),
        Some("chain")
    );
    assert_eq!(schedule.service, "waft-test");
    chained(&[
        schedule,
        step(&parent, "enqueue"),
        step(&parent, "claim"),
        step(&parent, "execute"),
    ]);
    let execute = step(&parent, "execute");
    assert_eq!(execute.kind, CONSUMER);
    assert_eq!(execute.attribute("waft.task.attempt"), Some("1"));
    assert_eq!(execute.attribute("waft.task.outcome"), Some("success"));
    assert_eq!(execute.attribute("waft.lambda"), Some("chain"));

    // …the child's from the parent's execution…
    let child_schedule = step(&child, "schedule");
    assert_eq!(
        child_schedule.parent_span_id, execute.span_id,
        "{child_schedule:#?}"
    );
    chained(&[
        child_schedule,
        step(&child, "enqueue"),
        step(&child, "claim"),
        step(&child, "execute"),
    ]);

    // …and its outbound request from its execution.
    let child_execute = step(&child, "execute");
    let http = spans
        .iter()
        .find(|s| s.trace_id == trace_id && s.kind == CLIENT)
        .unwrap();
    assert_eq!(http.parent_span_id, child_execute.span_id, "{http:#?}");
    assert_eq!(http.name, "POST");
    assert_eq!(http.attribute("http.request.method"), Some("POST"));
    assert_eq!(
        http.attribute("url.full"),
        Some(format!("{url}/hook").as_str())
    );
    assert_eq!(http.attribute("http.response.status_code"), Some("200"));

    // The server was told the request's span as its parent.
    let requests = server.requests();
    let hook = requests.iter().find(|r| r.path == "/hook").unwrap();
    assert_eq!(
        hook.header("traceparent"),
        Some(format!("00-{trace_id}-{}-01", http.span_id).as_str())
    );

    metadata_joins_the_trace(cluster, receiver).await;
}

/// A `Schedule` call's `traceparent` metadata is the parent of the task's
/// `schedule` span; a malformed field is refused, a malformed header
/// ignored.
async fn metadata_joins_the_trace(cluster: &Cluster, receiver: &OtlpReceiver) {
    use waft_api::proto;
    let mut raw = proto::frontend_client::FrontendClient::new(
        cluster.channel(&cluster.frontend_addr, cluster.token.as_deref()),
    );
    let request = |traceparent: Option<&str>, header: &str| {
        let mut request = tonic::Request::new(proto::ScheduleRequest {
            task: Some(proto::NewTask {
                lambda: "chain".into(),
                payload: b"{}".to_vec(),
                traceparent: traceparent.map(str::to_owned),
                ..Default::default()
            }),
        });
        request
            .metadata_mut()
            .insert("traceparent", header.parse().unwrap());
        request
    };
    let trace_id = format!("{:032x}", fastrand::u128(1..));
    let caller = format!("{:016x}", fastrand::u64(1..));
    let header = format!("00-{trace_id}-{caller}-01");
    let refused = raw
        .schedule(request(Some("00-nonsense"), &header))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    let id = raw
        .schedule(request(None, &header))
        .await
        .unwrap()
        .into_inner()
        .id;
    let ignored = raw
        .schedule(request(None, "00-Not-A-Trace"))
        .await
        .unwrap()
        .into_inner()
        .id;
    for task in [&id, &ignored] {
        let task = cluster.finished(task, WITHIN).await;
        assert_eq!(task.status, waft_core::TaskStatus::Success, "{task:#?}");
    }
    let spans = receiver
        // Each process exports its own spans in its own time: wait for the
        // Frontend's as well as the Executor's.
        .until(WITHIN, |spans| {
            ["schedule", "execute"].iter().all(|name| {
                find(spans, &trace_id, &id, name).is_some()
                    && spans.iter().any(|s| {
                        s.name == *name && s.attribute("waft.task.id") == Some(ignored.as_str())
                    })
            })
        })
        .await;
    let schedule = find(&spans, &trace_id, &id, "schedule").unwrap();
    assert_eq!(schedule.parent_span_id, caller, "{schedule:#?}");
    let fresh = spans
        .iter()
        .find(|s| s.name == "schedule" && s.attribute("waft.task.id") == Some(ignored.as_str()))
        .unwrap();
    assert!(fresh.parent_span_id.is_empty(), "a new trace: {fresh:#?}");
}

/// The span of step `name` of `task` in trace `trace_id`.
fn find<'a>(
    spans: &'a [ReceivedSpan],
    trace_id: &str,
    task: &str,
    name: &str,
) -> Option<&'a ReceivedSpan> {
    spans.iter().find(|s| {
        s.trace_id == trace_id && s.name == name && s.attribute("waft.task.id") == Some(task)
    })
}

/// Each span is the child of the one before it.
fn chained(steps: &[&ReceivedSpan]) {
    for pair in steps.windows(2) {
        assert_eq!(
            pair[1].parent_span_id, pair[0].span_id,
            "{} is a child of {}: {:#?}",
            pair[1].name, pair[0].name, pair
        );
    }
}
