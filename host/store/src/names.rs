//! The model's names as the store's SQL spells them: task statuses and the
//! sets of them the state table defines, attempt outcomes and gate codes,
//! held by the tests below to the model's own ([`TaskStatus`],
//! [`waft_core::machine`], [`AttemptOutcome`], [`GateState`]), so a rename
//! or a new state cannot leave a statement behind.
//!
//! [`TaskStatus`]: waft_core::TaskStatus
//! [`AttemptOutcome`]: crate::AttemptOutcome
//! [`GateState`]: crate::GateState

/// Task statuses, and the state table's sets of them, as SQL, written from
/// [`TaskStatus`]'s names and the sets [`waft_core::machine`] derives: no
/// statement spells a status itself (a test below reads every file that
/// holds SQL), so a new state reaches every statement through the table.
///
/// [`TaskStatus`]: waft_core::TaskStatus
pub(crate) mod status {
    use std::fmt;

    use waft_core::TaskStatus;
    use waft_core::machine::{self, StatusSet};

    /// One status as an SQL literal: `'new'`.
    #[derive(Debug, Clone, Copy)]
    pub struct One(TaskStatus);

    /// A set of statuses as an SQL list, `('new', 'enqueued')`, in life
    /// order (the order the predicate of the index `tasks_live` spells
    /// `LIVE` in, which SQLite's planner matches textually).
    #[derive(Debug, Clone, Copy)]
    pub struct Set(StatusSet);

    impl fmt::Display for One {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "'{}'", self.0)
        }
    }

    impl fmt::Display for Set {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(&self.0.sql())
        }
    }

    impl One {
        /// Any status.
        pub const fn of(status: TaskStatus) -> One {
            One(status)
        }
    }

    pub const NEW: One = One(TaskStatus::New);
    pub const ENQUEUED: One = One(TaskStatus::Enqueued);
    pub const CLAIMED: One = One(TaskStatus::Claimed);
    pub const PROCESSING: One = One(TaskStatus::Processing);
    pub const SUSPENDED: One = One(TaskStatus::Suspended);
    pub const SUCCESS: One = One(TaskStatus::Success);
    pub const FATAL_FAILURE: One = One(TaskStatus::FatalFailure);
    pub const DEAD: One = One(TaskStatus::Dead);
    pub const DROPPED: One = One(TaskStatus::Dropped);
    pub const CANCELLED: One = One(TaskStatus::Cancelled);
    /// Not ended.
    pub const UNFINISHED: Set = Set(machine::UNFINISHED);
    /// What the index `tasks_live` holds: all but the
    /// final states (a test holds the index to it).
    pub const LIVE: Set = Set(machine::LIVE);
    /// Holding a lease: claimed, or running and heartbeating.
    pub const RUNNING: Set = Set(machine::RUNNING);
    /// In flight: enqueued or running, what a lambda's concurrency per key
    /// counts (the trigger `tasks_landed` spells it: a test holds it to it).
    pub const IN_FLIGHT: Set = Set(machine::IN_FLIGHT);
    /// Ended for good: nothing brings the task back (a redrive brings
    /// `dead` back).
    pub const FINAL: Set = Set(machine::FINAL);
    /// Live and holding no lease: what a move to another version may take
    /// (a claim changes the lease it is guarded by).
    pub const WAITING: Set = Set(machine::LIVE.minus(machine::RUNNING));

    /// The status of a task waiting for its next attempt, as an SQL
    /// expression over its `attempt`.
    pub struct NextAttempt;

    impl fmt::Display for NextAttempt {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(
                f,
                "CASE WHEN attempt = 0 THEN {} ELSE {} END",
                One(machine::next_attempt(0)),
                One(machine::next_attempt(1))
            )
        }
    }

    pub const NEXT_ATTEMPT: NextAttempt = NextAttempt;
}

/// Attempt outcomes as SQL: the names [`AttemptOutcome`] parses (the tests
/// below hold them to it). `success` is spelled as a task status is, but
/// names an execution, not a task: it has a name of its own.
///
/// [`AttemptOutcome`]: crate::AttemptOutcome
pub(crate) mod outcome {
    pub const SUCCESS: &str = "'success'";
    pub const FATAL: &str = "'fatal'";
}

/// A task that ended (a state ended for good, or dead): every end sets its
/// `finished_at`, and a redrive clears it. The predicate of the indexes of
/// ended tasks (`tasks_ended`, `tasks_lambda_ended`; a test holds them to
/// it), which a statement spells to read them.
pub(crate) const ENDED: &str = "finished_at IS NOT NULL";

/// 2 when a drop gate covers task `t`, 1 for a pause gate, else 0 or NULL
/// (read by [`crate::rules::GateEffect::from_code`]).
pub(crate) const GATE_OF_TASK: &str = "(SELECT CAST(MAX(CASE g.state WHEN 'dropped' THEN 2 WHEN 'paused' THEN 1 ELSE 0 END) AS BIGINT) \
     FROM gates g WHERE g.lambda = t.lambda AND (g.collection = '' OR g.collection = t.collection))";

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use waft_core::TaskStatus;

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
    fn statuses_are_spelled_as_task_status_parses_them() {
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
            assert_eq!(statuses(&fragment.to_string()), BTreeSet::from([status]));
        }
        assert_eq!(
            status::NEXT_ATTEMPT.to_string(),
            "CASE WHEN attempt = 0 THEN 'new' ELSE 'retriable_failure' END"
        );
        assert_eq!(status::RUNNING.to_string(), "('claimed', 'processing')");
    }

    /// The newest migration of each backend whose text holds `what`.
    fn newest_making(what: &str) -> [(&'static str, &'static str); 2] {
        [
            ("sqlite", &crate::sqlite::MIGRATOR),
            ("postgres", &crate::postgres::MIGRATOR),
        ]
        .map(|(backend, migrator)| {
            let newest = migrator
                .iter()
                .rev()
                .map(|migration| migration.sql.as_ref())
                .find(|sql: &&str| sql.contains(what))
                .unwrap_or_else(|| panic!("{backend}: no migration makes {what}"));
            (backend, newest)
        })
    }

    /// The partial index `tasks_live` is defined with the live set as it
    /// was when the migration that makes it was released; released
    /// migrations never change, so a state added to the live set needs a
    /// migration that makes the index again, and this fails until the
    /// newest migration that makes it spells the live set of today.
    #[test]
    fn the_live_index_holds_the_live_set() {
        let live = status::LIVE.to_string();
        for (backend, newest) in newest_making("INDEX tasks_live") {
            assert!(
                newest.contains(&live),
                "{backend}: tasks_live must be defined with the live set {live}"
            );
        }
    }

    /// The partial indexes of ended tasks are defined by [`super::ENDED`],
    /// as the statements that read them spell it; with `tasks_live` (the
    /// states not final) they hold every status, so a list or count by any
    /// status finds an index of it.
    #[test]
    fn the_ended_indexes_hold_the_ended_tasks() {
        for what in ["INDEX tasks_ended", "INDEX tasks_lambda_ended"] {
            for (backend, newest) in newest_making(what) {
                let definition = newest
                    .split_once(&format!("CREATE {what}"))
                    .and_then(|(_, rest)| rest.split_once(';'))
                    .map(|(definition, _)| definition)
                    .unwrap_or_else(|| panic!("{backend}: no CREATE {what}"));
                assert!(
                    definition.ends_with(&format!(" WHERE {}", super::ENDED)),
                    "{backend}: {what} must be defined WHERE {}",
                    super::ENDED
                );
            }
        }
        assert_eq!(
            waft_core::machine::LIVE.union(waft_core::machine::FINAL),
            waft_core::machine::StatusSet::ALL
        );
    }

    /// The trigger that marks a key when one of its tasks changes state
    /// outside flight, and the index the poll counts a key's tasks in
    /// flight from, spell the set of states in flight; as
    /// for `tasks_live`, the newest migration that makes each must spell
    /// today's set.
    #[test]
    fn the_landing_trigger_and_the_flight_index_know_the_states_in_flight() {
        let in_flight = status::IN_FLIGHT.to_string();
        for (what, spelled) in [
            (
                "TRIGGER tasks_landed",
                format!("NEW.status NOT IN {in_flight}"),
            ),
            ("INDEX tasks_in_flight", format!("status IN {in_flight}")),
        ] {
            for (backend, newest) in newest_making(what) {
                assert!(newest.contains(&spelled), "{backend}: {what}: {spelled}");
            }
        }
    }

    #[test]
    fn outcome_names_are_the_ones_attempt_outcome_parses() {
        use crate::AttemptOutcome::{Fatal, Success};
        assert_eq!(super::outcome::SUCCESS, format!("'{}'", Success.as_str()));
        assert_eq!(super::outcome::FATAL, format!("'{}'", Fatal.as_str()));
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
