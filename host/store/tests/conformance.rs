//! The store conformance suite, run against every backend.
//!
//! `suite.rs` holds the checks; this file runs each one on a fresh store of
//! each backend: a SQLite file, and a database of its own on a throwaway
//! PostgreSQL cluster the tests start (see `waft-testing`; under `CI=true`
//! the Postgres tests fail rather than skip when it cannot start).

#[path = "conformance/suite.rs"]
mod suite;

use waft_store::{PostgresStore, SqliteStore, TaskStore};

/// A fresh SQLite store in a temporary file (not `:memory:`: the real thing,
/// with WAL and several connections).
async fn sqlite() -> (SqliteStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("waft.db"))
        .await
        .unwrap();
    (store, dir)
}

/// A fresh Postgres database on the test cluster; `None` (outside CI only)
/// when PostgreSQL is unavailable here.
async fn postgres() -> Option<PostgresStore> {
    let server = waft_testing::postgres()?;
    let url = server.fresh_database().await;
    Some(PostgresStore::connect(&url, 16).await.unwrap())
}

macro_rules! conformance {
    ($($check:ident),* $(,)?) => {
        mod sqlite_backend {
            $(
                #[tokio::test]
                async fn $check() {
                    let (store, _dir) = super::sqlite().await;
                    super::suite::$check(&store as &dyn super::TaskStore).await;
                }
            )*
        }

        mod postgres_backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    let Some(store) = super::postgres().await else { return };
                    super::suite::$check(&store as &dyn super::TaskStore).await;
                }
            )*
        }
    };
}

conformance!(
    lambdas_are_versioned,
    the_happy_path_follows_the_state_table,
    every_refusal_is_precise,
    a_lost_queue_message_is_enqueued_again,
    a_claim_that_never_starts_does_not_use_an_attempt,
    a_dead_executor_costs_an_attempt_and_the_last_one_is_dead,
    retriable_failures_back_off_then_die,
    a_fatal_failure_is_final,
    dead_letters_are_redriven_with_a_fresh_budget,
    paused_tasks_wait_and_resume_in_order,
    gates_on_a_collection_and_drops,
    cancel_ends_a_task_and_its_lease,
    bad_input_is_refused_and_nothing_is_half_written,
    idempotency_keys_deduplicate,
    lists_filter_and_page,
    each_occurrence_materialises_once,
    tokens_are_found_by_hash_until_revoked,
    the_backlog_is_the_oldest_waiting_task,
    children_of_a_superseded_execution_are_not_created,
    a_continuation_runs_once_on_success_with_the_output,
    versions_pin_roll_back_and_are_collected,
    a_quota_paces_a_backlog_and_spares_other_lambdas,
    concurrent_consumers_share_one_pace,
    concurrent_consumers_and_claimers_never_double_up,
    concurrent_inserts_with_one_key_make_one_task,
);
