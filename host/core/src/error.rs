//! The one error every role answers with, in terms any transport carries:
//! gRPC maps each kind to its status code in one place (`waft-client`), and
//! back again on the client side, so an in-process call and a remote one
//! fail the same way.

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

/// Result of a call to a role.
pub type ServiceResult<T> = Result<T, ServiceError>;
