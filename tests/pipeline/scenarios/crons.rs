//! Cron schedules: one task per occurrence, even with two consumers, and
//! none once removed; a bad expression, time zone or lambda refused with
//! nothing stored; and previews of the next occurrences, which save
//! nothing.

use std::time::{Duration, Instant};

use waft_core::TaskStatus;
use waft_sample_artifacts as samples;
use waft_services::{ClientApi, CronRequest, ServiceError};
use waft_store::TaskList;

use super::helpers::WITHIN;
use crate::support::Cluster;

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
