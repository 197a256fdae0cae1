//! Errors of the store: bad input the caller can report precisely, and
//! database failures it should log and retry.

use waft_core::{ConfigError, NameError, ServiceError, TaskStatus};

/// Why a store operation failed. Nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("unknown lambda {0:?}")]
    UnknownLambda(String),
    #[error(
        "lambda {lambda:?} has {live} tasks that may still run (waiting, running, suspended or \
         dead): let them end or cancel them, or delete it with its tasks (--drop-tasks)"
    )]
    LambdaHasTasks { lambda: String, live: u64 },
    #[error("lambda {lambda:?} has no version {version}")]
    UnknownVersion { lambda: String, version: u32 },
    #[error(
        "parent task {parent} no longer holds lease {lease}: its execution was superseded, so its children are not created"
    )]
    ParentLeaseLost { parent: String, lease: i64 },
    #[error(
        "lambda {parent_lambda:?} may not schedule tasks of lambda {child_lambda:?}: deploy it \
         with `--allow-child {child_lambda}` to allow it"
    )]
    ChildNotAllowed {
        parent_lambda: String,
        child_lambda: String,
    },
    #[error("no task {0}")]
    TaskNotFound(String),
    #[error("no cron schedule {0}")]
    CronNotFound(String),
    #[error(transparent)]
    InvalidName(#[from] NameError),
    #[error(transparent)]
    InvalidConfig(#[from] ConfigError),
    #[error("priority {priority} is invalid for lambda {lambda:?}: it has levels 0..={max}")]
    InvalidPriority {
        lambda: String,
        priority: u8,
        max: u8,
    },
    #[error("payload of {size} bytes is over lambda {lambda:?}'s limit of {max} bytes")]
    PayloadTooLarge {
        lambda: String,
        size: usize,
        max: u64,
    },
    #[error(
        "time {at} (Unix ms) is too far from now ({now}): use a time within a year back and ten years ahead"
    )]
    TimeOutOfRange { at: i64, now: i64 },
    #[error("task {id} has already ended ({status})")]
    AlreadyEnded { id: String, status: TaskStatus },
    #[error("task {id} keeps {max} signals already, the most a task may keep")]
    TooManySignals { id: String, max: u32 },
    #[error(
        "task {id} keeps {kept} bytes of signals; one of {size} bytes more would pass the \
         {max}-byte signal budget of a task (MAX_SIGNAL_BYTES, each signal counted with its \
         name and {overhead} bytes more): let it take those it has first"
    )]
    SignalBudget {
        id: String,
        kept: u64,
        size: u64,
        max: u64,
        overhead: u64,
    },
    #[error("task {id} is not dead (it is {status}); only dead tasks can be redriven or purged")]
    NotDead { id: String, status: TaskStatus },
    #[error("invalid request: {0}")]
    Invalid(String),
    /// A journal write's message out of its turn: a late copy of an
    /// earlier one, which must not undo what was written since.
    #[error(
        "task {id}'s journal took {taken} writes under this lease, but this one follows \
         {after}: it is a late copy of an earlier write, or out of order; nothing was written"
    )]
    JournalOutOfTurn { id: String, after: u32, taken: u32 },
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// The transaction that carried the call did not commit; nothing of it
    /// was written.
    #[error("database error: the transaction was not committed: {0}")]
    Commit(String),
    #[error("cannot migrate the database: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// The database was migrated by a newer release than this binary.
    #[error(
        "the database's schema has migration {applied}, newer than this binary knows (up to \
         {known}): a newer Waft migrated it. Run that release or a newer one; an older binary \
         does not start on it (docs/upgrades.md)"
    )]
    SchemaNewer { applied: i64, known: i64 },
    /// The database was made by a build from before the first release,
    /// whose schema no release migrates.
    #[error(
        "this database was made by a pre-release build of Waft (schema version {applied}); \
         Waft {release} starts from a new database: {remedy} (docs/upgrades.md)"
    )]
    PreRelease {
        applied: i64,
        release: &'static str,
        remedy: String,
    },
    #[error("corrupt row: {0}")]
    Corrupt(String),
}

impl StoreError {
    /// Whether the call gave way to another's row locks (Postgres's
    /// `lock_timeout`, 55P03): nothing was written, and trying it again is
    /// safe.
    pub fn gave_way(&self) -> bool {
        matches!(self, StoreError::Database(sqlx::Error::Database(error))
            if error.code().as_deref() == Some("55P03"))
    }
}

/// How a role answers a store failure: bad input precisely, a database
/// failure as "unavailable" (and logged), corruption as internal.
impl From<StoreError> for ServiceError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::UnknownLambda(name) => ServiceError::NotFound(format!(
                "unknown lambda {name:?}: deploy it first (waft lambda deploy {name} FILE.wasm)"
            )),
            StoreError::TaskNotFound(_)
            | StoreError::CronNotFound(_)
            | StoreError::UnknownVersion { .. } => ServiceError::NotFound(error.to_string()),
            StoreError::InvalidName(_)
            | StoreError::InvalidConfig(_)
            | StoreError::InvalidPriority { .. }
            | StoreError::TimeOutOfRange { .. }
            | StoreError::Invalid(_) => ServiceError::InvalidArgument(error.to_string()),
            StoreError::ChildNotAllowed { .. } => ServiceError::PermissionDenied(error.to_string()),
            StoreError::PayloadTooLarge { .. }
            | StoreError::TooManySignals { .. }
            | StoreError::SignalBudget { .. } => ServiceError::ResourceExhausted(error.to_string()),
            StoreError::AlreadyEnded { .. }
            | StoreError::NotDead { .. }
            | StoreError::LambdaHasTasks { .. }
            | StoreError::ParentLeaseLost { .. }
            | StoreError::JournalOutOfTurn { .. } => {
                ServiceError::FailedPrecondition(error.to_string())
            }
            StoreError::Database(_) | StoreError::Commit(_) => {
                tracing::error!(%error, "task store call failed");
                ServiceError::Unavailable("the task store is unavailable; retry later".into())
            }
            StoreError::Migrate(_)
            | StoreError::SchemaNewer { .. }
            | StoreError::PreRelease { .. }
            | StoreError::Corrupt(_) => {
                tracing::error!(%error, "task store is inconsistent");
                ServiceError::Internal(
                    "internal error in the task store; see the server log".into(),
                )
            }
        }
    }
}
