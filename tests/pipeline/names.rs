//! A name deployed again after `waft lambda delete` is another lambda: its
//! tasks run its own component, under its own grants, with its own secrets,
//! whatever the executors kept of the deleted one (its loaded code, its
//! opened secrets). Run in the shared installation of each mode, whose
//! executors have run the deleted lambda just before.

use std::time::Duration;

use serde_json::json;
use waft_core::TaskStatus;
use waft_sample_artifacts as samples;
use waft_services::{AdminApi, ClientApi};
use waft_store::Task;
use waft_testing::http::{HttpServer, Reply};

use crate::support::Cluster;

const WITHIN: Duration = Duration::from_secs(30);
const NAME: &str = "reused";

/// `webhook` under [`NAME`] with `source` as its `SOURCE` variable and
/// `token` as its `WEBHOOK_TOKEN` secret, then `hello` under the same name:
/// each deployed on the deleted one, each task must see only its own.
pub async fn a_name_deployed_again_is_a_new_lambda(cluster: &Cluster) {
    let server = HttpServer::start(|_| Reply::status(200, "ok")).await;
    let url = server.url();
    let deploy_webhook = |source: &'static str, token: &'static str| {
        let url = url.clone();
        async move {
            cluster
                .deploy(NAME, samples::WEBHOOK, |c| {
                    c.grants.outbound = vec![url.parse().unwrap()];
                    c.grants.env.insert("SOURCE".into(), source.into());
                })
                .await;
            cluster
                .frontend
                .secret_set(NAME, "WEBHOOK_TOKEN", token)
                .await
                .unwrap();
        }
    };
    let run = || async {
        let payload = json!({"url": format!("{url}/notify"), "name": "Ada"});
        let id = cluster.schedule(NAME, payload, None).await;
        cluster.finished(&id, WITHIN).await
    };
    let delete = || async {
        cluster.frontend.lambda_delete(NAME, true).await.unwrap();
    };
    // What each incarnation's task should have done and did, kept whole
    // so that one run shows every way the incarnations were confused.
    let mut wrong = Vec::new();

    deploy_webhook("billing", "tok-first-5a1e").await;
    let task = run().await;
    assert_eq!(task.status, TaskStatus::Success, "{task:#?}");
    let sent = server.requests().pop().expect("the first webhook's call");
    assert_eq!(sent.header("authorization"), Some("Bearer tok-first-5a1e"));
    assert_eq!(sent.header("x-waft-source"), Some("billing"));
    delete().await;

    // The same component again, another tenant's grants and secret.
    deploy_webhook("shipping", "tok-second-77c3").await;
    let calls = server.requests().len();
    let task = run().await;
    let sent = server.requests();
    match (task.status, sent.get(calls)) {
        (TaskStatus::Success, Some(sent)) => {
            let (token, source) = (sent.header("authorization"), sent.header("x-waft-source"));
            if token != Some("Bearer tok-second-77c3") {
                wrong.push(format!(
                    "the second webhook sent the token {token:?}, not its own secret's"
                ));
            }
            if source != Some("shipping") {
                wrong.push(format!(
                    "the second webhook ran under the grants giving SOURCE {source:?}"
                ));
            }
        }
        (status, _) => wrong.push(format!(
            "the second webhook's task: {}",
            ended(&task, status)
        )),
    }
    delete().await;

    // Another component under the name: its own code runs.
    cluster.deploy(NAME, samples::HELLO, |_| {}).await;
    let calls = server.requests().len();
    let task = run().await;
    let output = task
        .output
        .as_deref()
        .map(String::from_utf8_lossy)
        .unwrap_or_default()
        .into_owned();
    if task.status != TaskStatus::Success || !output.contains("Hello, Ada!") {
        wrong.push(format!(
            "hello deployed on the deleted webhook: {}",
            ended(&task, task.status)
        ));
    }
    if server.requests().len() > calls {
        wrong.push("hello deployed on the deleted webhook called the webhook's URL".into());
    }
    delete().await;
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// How a task ended, for a failure message.
fn ended(task: &Task, status: TaskStatus) -> String {
    let output = task.output.as_deref().map(String::from_utf8_lossy);
    format!(
        "{status:?}, version {:?}, output {output:?}, error {:?}",
        task.version, task.last_error
    )
}
