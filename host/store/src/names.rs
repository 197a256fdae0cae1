//! The model's names as the store's SQL spells them: task statuses,
//! attempt outcomes and gate codes, held by the tests below to the model's
//! own ([`TaskStatus`], [`AttemptOutcome`], [`GateState`]), so a rename
//! cannot leave a statement behind.
//!
//! [`TaskStatus`]: waft_core::TaskStatus
//! [`AttemptOutcome`]: crate::AttemptOutcome
//! [`GateState`]: crate::GateState

/// Task statuses, and sets of them, as SQL: the names [`TaskStatus`]
/// parses (the tests below hold them to it). The statements spell every
/// status through these.
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
    pub const WAITING: &str = "('new', 'retriable_failure', 'enqueued')";
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

    fn all_where(keep: impl Fn(TaskStatus) -> bool) -> BTreeSet<TaskStatus> {
        TaskStatus::ALL.into_iter().filter(|s| keep(*s)).collect()
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
            statuses(status::UNFINISHED),
            all_where(|s| !s.is_terminal())
        );
        assert_eq!(
            statuses(status::LIVE),
            all_where(|s| !s.is_terminal() || s == Dead)
        );
        assert!(
            include_str!("../migrations/sqlite/0012_overview.sql").contains(status::LIVE)
                && include_str!("../migrations/postgres/0012_overview.sql").contains(status::LIVE),
            "tasks_live must be defined with status::LIVE"
        );
        assert_eq!(
            statuses(status::RUNNING),
            all_where(|s| matches!(s, Claimed | Processing))
        );
        assert_eq!(
            statuses(status::WAITING),
            all_where(|s| matches!(s, New | RetriableFailure | Enqueued))
        );
        assert_eq!(
            statuses(status::FINAL),
            all_where(|s| s.is_terminal() && s != Dead)
        );
        assert_eq!(
            statuses(status::NEXT_ATTEMPT),
            BTreeSet::from([New, RetriableFailure])
        );
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

    /// Every statement spells statuses through [`status`], so a status
    /// renamed in [`TaskStatus`] cannot leave a statement behind. Every file
    /// of `sql/` is read, so a new one is held to it without being listed.
    #[test]
    fn statements_spell_no_status_themselves() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/sql");
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|ext| ext == "rs") {
                files.push((path.clone(), std::fs::read_to_string(&path).unwrap()));
            }
        }
        assert!(
            files.iter().any(|(path, _)| path.ends_with("stats.rs")),
            "read {dir}"
        );
        for status in TaskStatus::ALL {
            let quoted = format!("'{}'", status.as_str());
            for (path, text) in &files {
                assert!(
                    !text.contains(&quoted),
                    "{} spells {quoted}",
                    path.display()
                );
            }
        }
    }
}
