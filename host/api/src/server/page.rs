//! The dashboard's page beside the gRPC services: `GET` of one of its paths
//! goes to `waft-dashboard`'s routes before gRPC-web, authentication or the
//! services see it (a browser's plain HTTP/1.1 request is not gRPC, and the
//! page holds no data: every call it makes comes back through the API with
//! its user's token). Everything else goes on untouched. The host check
//! (`hosts.rs`) comes before it: a page asked for under a name the server
//! does not go by is not served, so a rebinding site cannot load it as its
//! own.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::http::{Method, Request, Response};
use tower::{Layer, Service, ServiceExt};

/// Serves the page when there is one (the Frontend's servers).
#[derive(Clone)]
pub(crate) struct PageLayer(pub(crate) Option<axum::Router>);

impl<S> Layer<S> for PageLayer {
    type Service = WithPage<S>;

    fn layer(&self, inner: S) -> WithPage<S> {
        WithPage {
            inner,
            page: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub(crate) struct WithPage<S> {
    inner: S,
    page: Option<axum::Router>,
}

impl<S, R> Service<Request<Body>> for WithPage<S>
where
    S: Service<Request<Body>, Response = Response<R>> + Send + 'static,
    S::Future: Send + 'static,
    R: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    R::Error: Into<tonic::codegen::StdError>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let is_page = matches!(*request.method(), Method::GET | Method::HEAD)
            && waft_dashboard::PATHS.contains(&request.uri().path());
        match &self.page {
            Some(page) if is_page => {
                let page = page.clone();
                Box::pin(async move {
                    let response: Result<_, Infallible> = page.oneshot(request).await;
                    let Ok(response) = response;
                    Ok(response.map(Body::new))
                })
            }
            _ => {
                let future = self.inner.call(request);
                Box::pin(async move { Ok(future.await?.map(Body::new)) })
            }
        }
    }
}
