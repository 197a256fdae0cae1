//! What a deploy's check found (`waft lambda deploy --check`): the journal
//! of every live task of a lambda replayed against new code, in the
//! sandbox and answered from the journal alone, before anything is stored.
//!
//! A task *resumes cleanly* when the new code makes every call its journal
//! holds, in order and with the same arguments: moved to that code, it
//! would go on from where it stands as if it had run it from the start.
//! Otherwise it *departs* at an entry: the new code calls something else
//! there, or ends, or stops (a trap, a limit) before its journal does.
//! Departures are grouped by where they happen, so ten thousand tasks
//! waiting at one step read as one line.

/// Tasks a [`Departure`] names by id, at most; the others are counted.
pub const DEPARTURE_EXAMPLES: usize = 20;

/// The report of a check, per version whose code wrote the journals.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeployCheck {
    pub lambda: String,
    /// Live tasks with a journal, checked.
    pub checked: u64,
    /// By the version that wrote the journals, oldest first.
    pub versions: Vec<VersionCheck>,
}

impl DeployCheck {
    /// Tasks whose journal the new code departs from.
    pub fn departed(&self) -> u64 {
        self.versions
            .iter()
            .flat_map(|v| &v.departures)
            .map(|d| d.count)
            .sum()
    }
}

/// The tasks whose journals one version wrote.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VersionCheck {
    /// `None`: journals whose version is not known (written before tasks
    /// kept it).
    pub version: Option<u32>,
    /// Tasks that resume cleanly on the new code.
    pub clean: u64,
    /// The others, grouped by where they depart, most tasks first.
    pub departures: Vec<Departure>,
}

/// Tasks that depart from their journals at the same entry, in the same
/// way.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Departure {
    /// The entry, from 0.
    pub seq: u32,
    /// The journal's call there (`wasi:http/outgoing-handler.handle`), or
    /// empty when the journal ends there.
    pub recorded: String,
    /// What the new code did there: the call it made, or how it ended
    /// (`its end: success`, `a trap`).
    pub instead: String,
    /// In words, for one of the tasks: `the journal has X (…), the new code
    /// calls Y`.
    pub example: String,
    /// How many tasks depart here.
    pub count: u64,
    /// The first [`DEPARTURE_EXAMPLES`] of them, by id.
    pub tasks: Vec<String>,
}

/// How far a check has come: tasks checked, of about how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CheckProgress {
    pub checked: u64,
    /// The live tasks of the lambda when the check began: at least the
    /// tasks with a journal among them.
    pub of: u64,
}

/// Tasks a check found clean, moved to the version it checked
/// (`TaskStore::task_move`): each only if it stands as it was checked (the
/// same lease, the same journal length) and is not running.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TaskMove {
    pub lambda: String,
    /// The version they move to.
    pub to: u32,
    pub tasks: Vec<Checked>,
}

/// A task as a check replayed it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Checked {
    pub id: String,
    pub lease_token: i64,
    pub journal_len: u32,
}

/// What a move did (`waft lambda move`): the check it made, and of the
/// tasks it found clean, how many moved and how many had changed
/// meanwhile (claimed, written to, ended) and stay where they were.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MoveReport {
    /// The version the tasks moved to.
    pub to: u32,
    pub check: DeployCheck,
    pub moved: u64,
    pub changed: u64,
}
