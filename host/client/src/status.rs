//! `ServiceError` ⇄ `tonic::Status`: the one place gRPC codes are chosen.

use tonic::{Code, Status};
use waft_core::ServiceError;

/// The status a role's error goes out as.
pub fn to_status(error: ServiceError) -> Status {
    match error {
        ServiceError::InvalidArgument(m) => Status::invalid_argument(m),
        ServiceError::NotFound(m) => Status::not_found(m),
        ServiceError::FailedPrecondition(m) => Status::failed_precondition(m),
        ServiceError::ResourceExhausted(m) => Status::resource_exhausted(m),
        ServiceError::Unavailable(m) => Status::unavailable(m),
        ServiceError::Internal(m) => Status::internal(m),
        ServiceError::Unauthenticated(m) => Status::unauthenticated(m),
        ServiceError::PermissionDenied(m) => Status::permission_denied(m),
    }
}

/// The error a status from `role` (e.g. "HSC") comes back as. Transport
/// failures and timeouts are `Unavailable`: retrying may help.
pub fn from_status(status: Status, role: &str) -> ServiceError {
    let message = status.message().to_owned();
    match status.code() {
        Code::InvalidArgument | Code::OutOfRange => ServiceError::InvalidArgument(message),
        Code::NotFound => ServiceError::NotFound(message),
        Code::FailedPrecondition | Code::AlreadyExists | Code::Aborted => {
            ServiceError::FailedPrecondition(message)
        }
        Code::ResourceExhausted => ServiceError::ResourceExhausted(message),
        Code::Unimplemented => ServiceError::FailedPrecondition(format!(
            "the server does not serve the {role} API (is this the address of a {role}?): {message}"
        )),
        Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown => {
            ServiceError::Unavailable(format!("the {role} is unavailable: {message}"))
        }
        Code::Unauthenticated => {
            ServiceError::Unauthenticated(format!("the {role} refused the call: {message}"))
        }
        Code::PermissionDenied => {
            ServiceError::PermissionDenied(format!("the {role} refused the call: {message}"))
        }
        // The connection broke below gRPC: what a plaintext client meets
        // at a TLS port. Not the server's own internal error.
        Code::Internal if message.starts_with("h2 protocol error") => ServiceError::Unavailable(
            format!("the {role} is unavailable: {message} (does the server use TLS? pass --ca)"),
        ),
        Code::Ok | Code::Internal | Code::DataLoss => {
            ServiceError::Internal(format!("the {role} failed: {message}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_survive_the_wire() {
        for error in [
            ServiceError::InvalidArgument("a".into()),
            ServiceError::NotFound("b".into()),
            ServiceError::FailedPrecondition("c".into()),
            ServiceError::ResourceExhausted("d".into()),
        ] {
            assert_eq!(from_status(to_status(error.clone()), "Frontend"), error);
        }
        assert!(matches!(
            from_status(Status::unavailable("down"), "HSC"),
            ServiceError::Unavailable(m) if m.contains("HSC")
        ));
    }
}
