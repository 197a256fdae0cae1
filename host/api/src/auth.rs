//! Authentication in front of every service: the bearer token of a call is
//! resolved to a [`Principal`] once, before the call reaches a role.
//!
//! Health and reflection stay open (load balancers and `grpcurl list` carry
//! no token); the dashboard's page never reaches this layer (`page.rs`),
//! while its calls, gRPC-web translated, do like any client's. The
//! Controller and HSC serve only the installation's own processes: they
//! need the cluster token, and refuse every client token, an admin's
//! included (an executor's calls claim tasks and write results and journal
//! entries under a lease; no client may). Frontend calls
//! carry their principal in the request's extensions, and the Frontend
//! acting for it checks each call (`waft_core::access`). The cluster
//! token stays distinct from an admin's there: only it may schedule under a
//! running task's lease, as the executor running that task does.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::Status;
use tonic::codegen::http;
use tower::{Layer, Service};
use waft_services::auth::{Authenticator, Principal};

use waft_client::status::to_status;

/// Calls whose path starts with one of these need no token.
const OPEN: [&str; 2] = ["/grpc.health.", "/grpc.reflection."];
/// Only these paths are for clients; every other service is internal.
const CLIENT_API: &str = "/waft.v1.Frontend/";

/// Authenticates calls when there is an authenticator; passes them through
/// untouched when there is none (auth off).
#[derive(Clone)]
pub(crate) struct AuthLayer(pub(crate) Option<Arc<Authenticator>>);

impl<S> Layer<S> for AuthLayer {
    type Service = Authenticated<S>;

    fn layer(&self, inner: S) -> Authenticated<S> {
        Authenticated {
            inner,
            auth: self.0.clone(),
        }
    }
}

/// A service whose calls were authenticated.
#[derive(Clone)]
pub(crate) struct Authenticated<S> {
    inner: S,
    auth: Option<Arc<Authenticator>>,
}

impl<S, B, R> Service<http::Request<B>> for Authenticated<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
    R: Default,
{
    type Response = http::Response<R>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let Some(auth) = self.auth.clone() else {
            return Box::pin(self.inner.call(request));
        };
        // The service that was polled ready serves this call; the clone
        // waits for the next.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move {
            let path = request.uri().path();
            if OPEN.iter().any(|open| path.starts_with(open)) {
                return inner.call(request).await;
            }
            let internal = !path.starts_with(CLIENT_API);
            let secret = request
                .headers()
                .get(http::header::AUTHORIZATION)
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.strip_prefix("Bearer "));
            let principal = match auth.authenticate(secret).await {
                Ok(principal) => principal,
                Err(error) => return Ok(to_status(error).into_http()),
            };
            if internal && principal != Principal::Cluster {
                let denied = Status::permission_denied(
                    "only the cluster token may call the Controller and HSC: they serve the \
                     installation's own processes",
                );
                return Ok(denied.into_http());
            }
            request.extensions_mut().insert(principal);
            inner.call(request).await
        })
    }
}

/// The principal of a Frontend call. When auth is off every caller is
/// trusted as the installation's own processes are: executors elsewhere
/// schedule their children under their tasks' leases.
pub(crate) fn principal<T>(request: &tonic::Request<T>) -> Principal {
    request
        .extensions()
        .get::<Principal>()
        .cloned()
        .unwrap_or(Principal::Cluster)
}
