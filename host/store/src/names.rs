//! The model's names as the store's SQL spells them: task statuses and the
//! sets of them the state table defines, attempt outcomes and gate codes,
//! held by the tests below to the model's own ([`TaskStatus`],
//! [`waft_core::machine`], [`AttemptOutcome`], [`GateState`]), so a rename
//! or a new state cannot leave a statement behind.
//!
//! [`TaskStatus`]: waft_core::TaskStatus
//! [`AttemptOutcome`]: crate::AttemptOutcome
//! [`GateState`]: crate::GateState

/// Task statuses, and the state table's sets of them, as SQL: the names
/// [`TaskStatus`] parses and the sets [`waft_core::machine`] derives (the
/// tests below hold them to both). The statements spell every status
/// through these.
///
/// [`TaskStatus`]: waft_core::TaskStatus
pub(crate) mod status {
    pub const NEW: &str = "'new'";
    pub const ENQUEUED: &str = "'enqueued'";
    pub const CLAIMED: &str = "'claimed'";
    pub const PROCESSING: &str = "'processing'";
    pub const SUCCESS: &str = "'success'";
    pub const DEAD: &str = "'dead'";
    pub const DROPPED: &str = "'dropped'";
    pub const CANCELLED: &str = "'cancelled'";
    /// Not ended.
    pub const UNFINISHED: &str =
        "('new', 'enqueued', 'claimed', 'processing', 'retriable_failure')";
    /// What the index `tasks_live` holds (migration 0012), spelled as it
    /// spells it so the planners see that it covers a statement: not ended,
    /// or dead.
    pub const LIVE: &str =
        "('new', 'enqueued', 'claimed', 'processing', 'retriable_failure', 'dead')";
    /// Holding a lease: claimed, or running and heartbeating.
    pub const RUNNING: &str = "('claimed', 'processing')";
    /// Due to start: new, retrying, or in a queue.
    pub const WAITING: &str = "('new', 'enqueued', 'retriable_failure')";
    /// Ended for good: every terminal status but `dead`, which a redrive
    /// may bring back.
    pub const FINAL: &str = "('success', 'fatal_failure', 'dropped', 'cancelled')";
    /// The status of a task waiting for its next attempt: `new` before its
    /// first, `retriable_failure` after.
    pub const NEXT_ATTEMPT: &str = "CASE WHEN attempt = 0 THEN 'new' ELSE 'retriable_failure' END";
}

/// Attempt outcomes as SQL: the names [`AttemptOutcome`] parses (the tests
/// below hold them to it). `success` is spelled as a task status is, but
/// names an execution, not a task: it has a name of its own.
///
/// [`AttemptOutcome`]: crate::AttemptOutcome
pub(crate) mod outcome {
    pub const SUCCESS: &str = "'success'";
}

/// 2 when a drop gate covers task `t`, 1 for a pause gate, else 0 or NULL
/// (read by [`crate::rules::GateEffect::from_code`]).
pub(crate) const GATE_OF_TASK: &str = "(SELECT CAST(MAX(CASE g.state WHEN 'dropped' THEN 2 WHEN 'paused' THEN 1 ELSE 0 END) AS BIGINT) \
     FROM gates g WHERE g.lambda = t.lambda AND (g.collection = '' OR g.collection = t.collection))";

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use waft_core::{TaskStatus, machine};

    use super::status;
    use crate::GateState;

    /// The quoted names in a fragment, each parsed as a status.
    fn statuses(fragment: &str) -> BTreeSet<TaskStatus> {
        fragment
            .split('\'')
            .skip(1)
            .step_by(2)
            .map(|name| {
                name.parse()
                    .unwrap_or_else(|_| panic!("{name:?} in {fragment:?} is no task status"))
            })
            .collect()
    }

    #[test]
    fn status_names_are_the_ones_task_status_parses() {
        use TaskStatus::*;
        for (fragment, status) in [
            (status::NEW, New),
            (status::ENQUEUED, Enqueued),
            (status::CLAIMED, Claimed),
            (status::PROCESSING, Processing),
            (status::SUCCESS, Success),
            (status::DEAD, Dead),
            (status::DROPPED, Dropped),
            (status::CANCELLED, Cancelled),
        ] {
            assert_eq!(fragment, format!("'{}'", status.as_str()));
        }
        assert_eq!(
            statuses(status::NEXT_ATTEMPT),
            [machine::waiting(0), machine::waiting(1)]
                .into_iter()
                .collect()
        );
    }

    /// Each set the statements use is the state table's set of that name,
    /// spelled in its order.
    #[test]
    fn status_sets_are_the_state_tables() {
        for (fragment, set) in [
            (status::UNFINISHED, machine::UNFINISHED),
            (status::LIVE, machine::LIVE),
            (status::RUNNING, machine::RUNNING),
            (status::WAITING, machine::WAITING),
            (status::FINAL, machine::FINAL),
        ] {
            assert_eq!(statuses(fragment), set.iter().collect(), "{fragment}");
            assert_eq!(fragment, set.sql(), "{fragment} is spelled in life order");
        }
    }

    /// The partial index `tasks_live` of migration 0012 is defined with
    /// the live set as it was when that migration was released; released
    /// migrations never change, so a state added to the live set needs a
    /// migration that rebuilds the index, and this fails until then.
    #[test]
    fn the_live_index_holds_the_live_set() {
        for migration in [
            include_str!("../migrations/sqlite/0012_overview.sql"),
            include_str!("../migrations/postgres/0012_overview.sql"),
        ] {
            assert!(
                migration.contains(status::LIVE),
                "tasks_live must be defined with status::LIVE ({})",
                status::LIVE
            );
        }
    }

    #[test]
    fn outcome_names_are_the_ones_attempt_outcome_parses() {
        let success = crate::AttemptOutcome::Success;
        assert_eq!(super::outcome::SUCCESS, format!("'{}'", success.as_str()));
    }

    #[test]
    fn gate_codes_name_the_gate_states() {
        for state in [GateState::Dropped, GateState::Paused] {
            assert!(super::GATE_OF_TASK.contains(&format!("'{}'", state.as_str())));
        }
    }

    /// Every statement spells statuses through [`status`] (or, outside the
    /// store, through the state table's sets), so a status renamed or
    /// added in [`TaskStatus`] cannot leave a statement behind. Every Rust
    /// file of the workspace that holds SQL is read, tests included, so a
    /// new one is held to it without being listed.
    #[test]
    fn statements_spell_no_status_themselves() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
        let mut files = Vec::new();
        for dir in ["host", "tests"] {
            rust_files(&std::path::Path::new(root).join(dir), &mut files);
        }
        let holds_sql = |text: &str| {
            ["SELECT ", "UPDATE ", "INSERT INTO", "DELETE FROM"]
                .iter()
                .any(|keyword| text.contains(keyword))
        };
        let sql_files: Vec<_> = files
            .into_iter()
            .filter(|(path, text)| holds_sql(text) && !path.ends_with("src/names.rs"))
            .collect();
        for expected in ["sql/stats.rs", "tests/chaos.rs"] {
            assert!(
                sql_files.iter().any(|(path, _)| path.ends_with(expected)),
                "{expected} holds SQL and was not read"
            );
        }
        for status in TaskStatus::ALL {
            let quoted = format!("'{}'", status.as_str());
            for (path, text) in &sql_files {
                assert!(
                    !text.contains(&quoted),
                    "{} spells {quoted}",
                    path.display()
                );
            }
        }
    }

    fn rust_files(dir: &std::path::Path, into: &mut Vec<(std::path::PathBuf, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy();
            if path.is_dir() {
                if !matches!(&*name, "target" | "node_modules") {
                    rust_files(&path, into);
                }
            } else if name.ends_with(".rs") {
                into.push((path.clone(), std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
}
