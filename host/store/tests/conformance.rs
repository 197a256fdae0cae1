//! The store conformance suite, run against every backend.
//!
//! The checks live in `conformance/`, one file per area as the store's SQL
//! is split (lambdas and their artifacts, the state table, tasks as clients
//! write them, as they read them and the tasks they make, journals and the
//! versions they pin, suspended tasks, gates, pacing, limits per key, rates per key, fairness between keys, debounce, cron, tokens, retention, the task history) and one for the guarantees on paths a crash soak never
//! takes; this file runs each one on a fresh store of each backend: a SQLite
//! file, and a database of its own on a throwaway PostgreSQL cluster the
//! tests start (see `waft-testing`; under `CI=true` the Postgres tests fail
//! rather than skip when it cannot start).

#[path = "conformance/artifacts.rs"]
mod artifacts;
#[path = "conformance/children.rs"]
mod children;
#[path = "conformance/cron.rs"]
mod cron;
#[path = "conformance/debounce.rs"]
mod debounce;
#[path = "conformance/deleted_children.rs"]
mod deleted_children;
#[path = "conformance/fairness.rs"]
mod fairness;
#[path = "conformance/fan_in.rs"]
mod fan_in;
#[path = "conformance/final_attempts.rs"]
mod final_attempts;
#[path = "conformance/gate_guarantees.rs"]
mod gate_guarantees;
#[path = "conformance/gates.rs"]
mod gates;
#[path = "conformance/generations.rs"]
mod generations;
#[path = "conformance/guarantees.rs"]
mod guarantees;
#[path = "conformance/history.rs"]
mod history;
#[path = "conformance/journal.rs"]
mod journal;
#[path = "conformance/journal_parts.rs"]
mod journal_parts;
#[path = "conformance/journal_versions.rs"]
mod journal_versions;
#[path = "conformance/journaled.rs"]
mod journaled;
#[path = "conformance/keys.rs"]
mod keys;
#[path = "conformance/lambda_deletes.rs"]
mod lambda_deletes;
#[path = "conformance/lambdas.rs"]
mod lambdas;
#[path = "conformance/lifecycle.rs"]
mod lifecycle;
#[path = "conformance/moments.rs"]
mod moments;
#[path = "conformance/pacing.rs"]
mod pacing;
#[path = "conformance/rates.rs"]
mod rates;
#[path = "conformance/retention.rs"]
mod retention;
#[path = "conformance/secrets.rs"]
mod secrets;
#[path = "conformance/signals.rs"]
mod signals;
#[path = "conformance/support.rs"]
mod support;
#[path = "conformance/suspension.rs"]
mod suspension;
#[path = "conformance/task_lists.rs"]
mod task_lists;
#[path = "conformance/tasks.rs"]
mod tasks;
#[path = "conformance/tokens.rs"]
mod tokens;

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

/// Runs each check of each area on each backend, each a test of its own:
/// `sqlite_backend::AREA::CHECK` and `postgres_backend::AREA::CHECK`.
macro_rules! conformance {
    ($($area:ident: [$($check:ident),* $(,)?]),* $(,)?) => {
        mod sqlite_backend {
            $(
                mod $area {
                    $(
                        #[tokio::test]
                        async fn $check() {
                            let (store, _dir) = crate::sqlite().await;
                            crate::$area::$check(&store as &dyn crate::TaskStore).await;
                        }
                    )*
                }
            )*
        }

        mod postgres_backend {
            $(
                mod $area {
                    $(
                        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                        async fn $check() {
                            let Some(store) = crate::postgres().await else { return };
                            crate::$area::$check(&store as &dyn crate::TaskStore).await;
                        }
                    )*
                }
            )*
        }
    };
}

conformance!(
    artifacts: [artifacts_are_kept_per_engine_and_collected_with_their_component],
    final_attempts: [a_final_execution_reads_back_whole],
    lambda_deletes: [no_task_outlives_its_lambda_deleted_during_an_insert],
    lambdas: [
        lambdas_are_versioned,
        versions_pin_roll_back_and_are_collected,
        grants_are_kept_with_each_version,
        a_pinned_task_retries_with_its_versions_policy,
    ],
    lifecycle: [
        the_happy_path_follows_the_state_table,
        every_refusal_is_precise,
        a_lost_queue_message_is_enqueued_again,
        a_lapsed_claim_is_enqueued_again_under_a_new_lease,
        a_lease_counts_claims_and_cannot_be_guessed,
        a_dead_executor_costs_an_attempt_and_the_last_one_is_dead,
        retriable_failures_back_off_then_die,
        a_fatal_failure_is_final,
        dead_letters_are_redriven_with_a_fresh_budget,
        the_backlog_is_the_oldest_waiting_task,
    ],
    tasks: [
        cancel_ends_a_task_and_its_lease,
        bad_input_is_refused_and_nothing_is_half_written,
        idempotency_keys_deduplicate,
        concurrent_inserts_with_one_key_make_one_task,
    ],
    retention: [
        ended_tasks_go_after_their_retention_with_all_kept_of_them,
        batches_are_bounded_and_take_the_oldest_first,
        a_lambdas_own_retention_speaks_over_the_installations,
        a_task_stays_while_its_parent_or_a_child_is_live,
        dead_letters_stay_until_purged,
        one_holder_at_a_time_takes_a_duty,
        a_lambda_is_deleted_with_all_it_has_once_nothing_of_it_may_run,
    ],
    keys: [
        a_keys_tasks_in_flight_stay_within_its_limit,
        a_redeploy_lets_parked_tasks_go,
        a_limit_deployed_later_counts_the_tasks_in_flight,
        a_first_limit_deployed_during_a_poll_counts_what_it_enqueues,
        a_woken_task_that_does_not_go_leaves_its_place,
        a_paced_task_that_leaves_gives_back_its_place,
        racing_consumers_never_pass_a_keys_limit,
        two_polls_at_once_give_one_place,
    ],
    debounce: [
        a_keys_debounced_tasks_collapse_into_the_first,
        a_stream_postpones_a_debounced_task_ten_windows_at_most,
        a_held_or_parked_debounced_task_lets_the_next_start_anew,
        concurrent_debounced_inserts_make_one_task,
        bad_debounces_are_refused,
        a_debounced_task_keeps_its_keys_slot,
    ],
    rates: [
        a_keys_rate_paces_its_tasks_and_spares_the_others,
        a_rate_and_a_quota_take_their_slots_in_turn,
        racing_consumers_share_a_keys_bucket,
        a_redeploy_repaces_rated_tasks,
    ],
    fairness: [
        a_keys_backlog_waits_its_turn_and_another_key_goes_at_once,
        weights_scale_a_keys_lookahead,
        a_lambdas_lookahead_is_what_a_key_keeps_queued,
        a_redeploy_without_fairness_lets_the_backlog_go,
        a_quota_does_not_let_a_backlog_out_of_its_turn,
        racing_consumers_never_queue_past_a_keys_turn,
    ],
    task_lists: [
        lists_filter_and_page,
        keys_round_trip_and_filter,
        lists_keep_to_the_lambdas_given,
        counts_follow_statuses,
        lists_by_creation_time_both_ways,
        lambda_stats_follow_the_tasks,
    ],
    children: [
        children_of_a_superseded_execution_are_not_created,
        a_child_keeps_the_id_its_parent_chose,
        a_continuation_runs_once_on_success_with_the_output,
        a_trace_context_travels_with_the_task_and_its_continuation,
    ],
    journal: [
        journals_are_written_replaced_and_cut,
        journal_writes_are_fenced_by_the_lease,
        malformed_journal_writes_are_refused_whole,
        results_carry_journal_writes,
        journals_hold_any_string_and_bytes,
    ],
    journaled: [
        live_journals_are_read_a_page_at_a_time,
        a_move_takes_only_tasks_as_they_were_checked,
    ],
    suspension: [
        a_suspended_task_waits_then_resumes_with_its_attempt,
        suspensions_spend_no_attempts,
        a_suspended_task_can_be_cancelled,
        gates_hold_and_drop_suspended_tasks,
        the_overview_counts_suspended_tasks,
    ],
    signals: [
        signals_are_kept_and_taken_in_order,
        a_signal_wakes_the_task_suspended_waiting_for_it,
        a_signal_sent_before_the_suspension_wakes_it_at_once,
        signals_to_ended_tasks_and_bad_signals_are_refused,
        the_overview_counts_tasks_waiting_for_signals,
        a_tasks_signals_are_bounded_by_bytes,
    ],
    fan_in: [
        a_fan_in_wakes_when_its_last_child_ends,
        children_ended_before_the_suspension_wake_it_at_once,
        reads_of_children_are_fenced_and_their_own,
        children_ending_during_the_suspension_never_leave_it_asleep,
    ],
    deleted_children: [
        an_ended_child_deleted_with_its_lambda_keeps_its_end,
        a_live_child_dropped_with_its_lambda_wakes_its_parent,
        a_purged_dead_child_ends_for_its_parent,
    ],
    journal_parts: [
        a_late_copy_of_an_earlier_write_is_refused,
        a_write_cut_short_between_its_parts_loses_nothing,
    ],
    journal_versions: [
        a_journal_pins_its_version,
        gc_keeps_the_versions_journals_need,
        redrives_keep_or_discard_journals,
        on_divergence_is_kept_per_version,
        versions_show_and_keep_what_suspended_tasks_need,
    ],
    gates: [paused_tasks_wait_and_resume_in_order, gates_on_a_collection_and_drops],
    generations: [
        each_discarded_journal_starts_a_new_generation,
        a_fresh_journals_first_write_stores_its_generation,
    ],
    pacing: [
        a_quota_paces_a_backlog_and_spares_other_lambdas,
        concurrent_consumers_share_one_pace,
        concurrent_consumers_and_claimers_never_double_up,
    ],
    cron: [each_occurrence_materialises_once],
    history: [
        minutes_add_up_across_writers_and_lambdas,
        results_answer_their_tasks_lambda,
        a_deleted_lambda_takes_its_history,
    ],
    tokens: [tokens_are_found_by_hash_until_revoked],
    secrets: [
        secrets_are_kept_sealed_and_versioned,
        a_name_deployed_again_never_repeats_a_version,
    ],
    gate_guarantees: [
        a_pause_stops_claims_of_queued_tasks,
        a_paused_backlog_is_not_run_and_resume_reruns_nothing,
        a_lapsed_execution_under_a_pause_is_held_and_counted,
        gates_never_touch_ended_tasks,
        a_resume_racing_a_poll_strands_nothing,
    ],
    guarantees: [
        cancel_and_results_race_atomically,
        cancel_leaves_ended_tasks_alone,
        any_string_round_trips,
        an_expired_claim_costs_its_attempt,
        retry_delays_are_bounded,
        raising_a_quota_releases_paced_tasks,
        reserved_idempotency_keys_are_refused,
        children_of_other_lambdas_need_a_grant,
        the_store_clock_reads_unix_milliseconds,
        a_cron_whose_task_is_refused_moves_on,
        continuations_keep_their_key,
    ],
);

/// Across processes, a Frontend tells Store Consumers when tasks come due
/// through a Postgres notification that carries the due time.
#[tokio::test]
async fn postgres_due_notifications_carry_the_due_time() {
    let Some(store) = postgres().await else {
        eprintln!("skipping: PostgreSQL is not available here");
        return;
    };
    let mut listener = store.listen_due().await.unwrap();
    store.notify_due(1_800_000_004_321).await.unwrap();
    let notification = tokio::time::timeout(std::time::Duration::from_secs(10), listener.recv())
        .await
        .expect("the notification arrives")
        .unwrap();
    assert_eq!(
        PostgresStore::due_time(&notification),
        Some(1_800_000_004_321)
    );
}

/// A deploy that counts a lambda's tasks in flight anew locks their rows,
/// which results and heartbeats lock in their own batches' order: when one
/// holds a row the deploy waits for and then waits for a row the deploy
/// holds, the deploy gives way (its lock wait times out well before
/// Postgres's deadlock check) and is tried again once the other has
/// committed; neither fails.
#[tokio::test]
async fn postgres_a_deploy_gives_way_to_a_batchs_row_locks() {
    use sqlx::Connection as _;
    use support::*;
    let Some(server) = waft_testing::postgres() else {
        eprintln!("skipping: PostgreSQL is not available here");
        return;
    };
    let url = server.fresh_database().await;
    let store = PostgresStore::connect(&url, 4).await.unwrap();
    deploy(&store, "mail").await;
    for at in [T0, T0 + 1] {
        let task = waft_store::NewTask {
            key: Some("acme".into()),
            ..new_task("mail")
        };
        insert(&store, task, at).await;
    }
    let mut flying: Vec<String> = poll(&store, T0 + 10)
        .await
        .enqueued
        .into_iter()
        .map(|t| t.id)
        .collect();
    flying.sort();
    assert_eq!(flying.len(), 2);
    // The batch locks the later row first; the deploy (rows in id order)
    // then holds the earlier one and waits for the later.
    let mut batch = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut batch).await.unwrap();
    let lock_row = "SELECT id FROM tasks WHERE id = $1 FOR UPDATE";
    sqlx::query(lock_row)
        .bind(&flying[1])
        .execute(&mut batch)
        .await
        .unwrap();
    let limited = waft_core::LambdaConfig {
        key_concurrency: Some(1),
        ..config()
    };
    let deploying = tokio::spawn({
        let store = store.clone();
        async move { deploy_with(&store, "mail", limited).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    sqlx::query(lock_row)
        .bind(&flying[0])
        .execute(&mut batch)
        .await
        .expect("the batch is not chosen to break a deadlock");
    sqlx::query("COMMIT").execute(&mut batch).await.unwrap();
    deploying
        .await
        .expect("the deploy succeeds once tried again");
    // The deploy counted both tasks in flight: the key's next one parks.
    let next = waft_store::NewTask {
        key: Some("acme".into()),
        ..new_task("mail")
    };
    insert(&store, next, T0 + 20).await;
    assert_eq!(poll(&store, T0 + 30).await.parked, 1);
}
