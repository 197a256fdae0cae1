//! The one error every role answers with, in terms any transport carries:
//! gRPC maps each kind to its status code in one place (`waft-api`), and
//! back again on the client side, so an in-process call and a remote one
//! fail the same way.

use waft_store::StoreError;

/// Why a call to a role failed. The message is for a person: it says what
/// was wrong and, where it can, what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServiceError {
    /// The request is wrong; retrying it unchanged will fail again.
    #[error("{0}")]
    InvalidArgument(String),
    /// What the request names does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The request is valid but the thing it acts on is in the wrong state.
    #[error("{0}")]
    FailedPrecondition(String),
    /// The call carries no valid token.
    #[error("{0}")]
    Unauthenticated(String),
    /// The token may not do this.
    #[error("{0}")]
    PermissionDenied(String),
    /// The request is larger than the role accepts.
    #[error("{0}")]
    ResourceExhausted(String),
    /// The role or one it depends on cannot answer now; retry later.
    #[error("{0}")]
    Unavailable(String),
    /// A bug or corrupt data; the details are in the role's log.
    #[error("{0}")]
    Internal(String),
}

impl From<StoreError> for ServiceError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::UnknownLambda(name) => ServiceError::NotFound(format!(
                "unknown lambda {name:?}: deploy it first (waft lambda deploy {name} FILE.wasm)"
            )),
            StoreError::TaskNotFound(_)
            | StoreError::ScheduleNotFound(_)
            | StoreError::UnknownVersion { .. } => ServiceError::NotFound(error.to_string()),
            StoreError::InvalidName(_)
            | StoreError::InvalidConfig(_)
            | StoreError::InvalidPriority { .. }
            | StoreError::TimeOutOfRange { .. }
            | StoreError::Invalid(_) => ServiceError::InvalidArgument(error.to_string()),
            StoreError::ChildNotAllowed { .. } => ServiceError::PermissionDenied(error.to_string()),
            StoreError::PayloadTooLarge { .. } => {
                ServiceError::ResourceExhausted(error.to_string())
            }
            StoreError::AlreadyEnded { .. }
            | StoreError::NotDead { .. }
            | StoreError::ParentLeaseLost { .. } => {
                ServiceError::FailedPrecondition(error.to_string())
            }
            StoreError::Database(_) => {
                tracing::error!(%error, "task store call failed");
                ServiceError::Unavailable("the task store is unavailable; retry later".into())
            }
            StoreError::Migrate(_) | StoreError::Corrupt(_) => {
                tracing::error!(%error, "task store is inconsistent");
                ServiceError::Internal(
                    "internal error in the task store; see the server log".into(),
                )
            }
        }
    }
}

/// Result of a call to a role.
pub type ServiceResult<T> = Result<T, ServiceError>;
