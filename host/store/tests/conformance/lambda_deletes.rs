//! A lambda deleted while tasks of it are being inserted: no task outlives
//! its lambda, whichever commits first.
//!
//! Postgres checks a task's lambda once a batch, under a lock of the
//! lambda's row that a delete must wait for (not with a foreign key checked
//! on every row): a batch that read its lambda is deleted with it, and a
//! batch that comes after the delete is refused. SQLite writes one
//! transaction at a time, so it holds by construction; it runs the same
//! check.

use std::time::Duration;

use waft_store::{LambdaDelete, StoreError, TaskInsertMany, TaskList, TaskStore};

use crate::support::{T0, deploy, new_task};

/// Tasks in each racing batch: enough that its insert takes a while, so
/// that the delete lands within it.
const BATCH: usize = 2_000;

pub async fn no_task_outlives_its_lambda_deleted_during_an_insert(store: &dyn TaskStore) {
    let mut refused = 0;
    let mut deleted_with_it = 0;
    for round in 0..12u64 {
        deploy(store, "racing").await;
        let batch = TaskInsertMany {
            tasks: (0..BATCH).map(|_| new_task("racing")).collect(),
            now: T0,
        };
        let delete = async {
            // Sent while the batch is being written, at varying depths.
            tokio::time::sleep(Duration::from_millis(1 + round % 6 * 3)).await;
            store
                .lambda_delete(LambdaDelete {
                    name: "racing".into(),
                    drop_tasks: true,
                })
                .await
        };
        let (inserted, deleted) = tokio::join!(store.task_insert_many(batch), delete);
        let deleted = deleted.expect("the delete succeeds, whenever it comes");
        match inserted {
            Ok(tasks) => {
                assert_eq!(tasks.len(), BATCH);
                // The batch committed first: the delete waited and took its tasks.
                assert_eq!(deleted.tasks, BATCH as u64, "round {round}: {deleted:?}");
                deleted_with_it += 1;
            }
            Err(StoreError::UnknownLambda(name)) => {
                assert_eq!(name, "racing");
                refused += 1;
            }
            Err(other) => panic!("round {round}: the batch failed otherwise: {other}"),
        }
        let left = store
            .task_list(TaskList {
                lambda: Some("racing".into()),
                limit: 1000,
                ..TaskList::default()
            })
            .await
            .unwrap();
        assert!(
            left.is_empty(),
            "round {round}: {} tasks outlived their deleted lambda",
            left.len()
        );
    }
    eprintln!("batches refused: {refused}, deleted with their lambda: {deleted_with_it}");
}
