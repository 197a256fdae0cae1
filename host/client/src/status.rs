//! `ServiceError` ⇄ `tonic::Status`: the one place gRPC codes are chosen.
//!
//! Two failures below gRPC get words of their own, because the transport's
//! say nothing useful: a message over its receiver's limit is "too large"
//! (`RESOURCE_EXHAUSTED`: retrying cannot help), and a connection the
//! server closes under the call — what a plaintext call to a TLS port
//! meets — asks whether the server uses TLS. Nothing else asks it: an
//! HTTP/2 reset over a message's size is no TLS mismatch.

use std::io::ErrorKind;

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
        // tonic's refusal of a message over a limit: a server's of an
        // answer it encodes (a client's own send limit never ends in a
        // status: the clients check first), or of a request it decodes, or
        // this client's of an answer.
        Code::OutOfRange if message.contains("message length too large") => {
            let what = if message.contains("encoded") {
                "answer"
            } else {
                "request or answer"
            };
            ServiceError::ResourceExhausted(format!("{what} too large for the {role}: {message}"))
        }
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
            let hint = tls_hint(&status);
            ServiceError::Unavailable(format!("the {role} is unavailable: {message}{hint}"))
        }
        Code::Unauthenticated => {
            ServiceError::Unauthenticated(format!("the {role} refused the call: {message}"))
        }
        Code::PermissionDenied => {
            ServiceError::PermissionDenied(format!("the {role} refused the call: {message}"))
        }
        // The stream broke below gRPC (a reset, a connection lost): not
        // the server's own internal error.
        Code::Internal if message.starts_with("h2 protocol error") => {
            ServiceError::Unavailable(format!("the {role} is unavailable: {message}"))
        }
        Code::Ok | Code::Internal | Code::DataLoss => {
            ServiceError::Internal(format!("the {role} failed: {message}"))
        }
    }
}

/// What to ask when the server closed the connection under the call: the
/// way a TLS server closes a plaintext one (the client's writes then fail,
/// or its reads end).
fn tls_hint(status: &Status) -> &'static str {
    let mut source = std::error::Error::source(status);
    while let Some(error) = source {
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                ErrorKind::BrokenPipe | ErrorKind::ConnectionReset | ErrorKind::UnexpectedEof => {
                    " (the server closed the connection: if it uses TLS, pass --ca)"
                }
                _ => "",
            };
        }
        source = error.source();
    }
    ""
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

    #[test]
    fn a_message_over_the_limit_is_too_large_and_no_tls_question() {
        for (message, said) in [
            (
                "Error, decoded message length too large: found 17825812 bytes, the limit is: \
                 16777216 bytes",
                "request or answer too large for the HSC",
            ),
            (
                "Error, encoded message length too large: found 17825812 bytes, the limit is: \
                 16777216 bytes",
                "answer too large for the HSC",
            ),
        ] {
            let error = from_status(Status::out_of_range(message), "HSC");
            assert!(
                matches!(&error, ServiceError::ResourceExhausted(m) if m.starts_with(said)),
                "{error:?}"
            );
        }
        let reset = from_status(Status::internal("h2 protocol error: http2 error"), "HSC");
        assert!(!reset.to_string().contains("TLS"), "{reset}");
        assert!(matches!(reset, ServiceError::Unavailable(_)), "{reset:?}");
        // Any other out-of-range value is the caller's to fix.
        assert!(matches!(
            from_status(Status::out_of_range("priority 9"), "Frontend"),
            ServiceError::InvalidArgument(_)
        ));
    }
}
