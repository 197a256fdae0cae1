//! The names a server answers to. Every request — the page, gRPC-web,
//! plain gRPC — whose `Host` (HTTP/1.1) or `:authority` (HTTP/2) names a
//! host the server does not go by is refused before anything else sees it.
//!
//! Why: a web page can point a name of its own at 127.0.0.1 (DNS
//! rebinding) and then reach a server on loopback as if it were its own
//! origin, reading the page's answers and calling the API; the browser
//! still sends that name as the `Host`. Answered:
//!
//! - an IP address, any: a browser sends an address as the `Host` only
//!   when it connected to that very address, so an address cannot be
//!   rebound (and a port mapping or a load balancer in between still
//!   works);
//! - `localhost`, when the connection arrived on a loopback address;
//! - the names configured (`allowed_hosts`).
//!
//! A request that says where its page came from (`Origin`) must come from
//! the server's own origin — the host and port it is asking for — or from a
//! configured name: a page of another site is refused even for the
//! requests a browser would send without asking the server first.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::Status;
use tonic::body::Body;
use tonic::codegen::http::header::{CONTENT_TYPE, HOST, ORIGIN};
use tonic::codegen::http::uri::Authority;
use tonic::codegen::http::{HeaderMap, HeaderValue, Request, Response, StatusCode, Uri};
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
use tower::{Layer, Service};
use waft_core::grants::parse_address;

/// The host names a server answers to besides its addresses (and
/// `localhost` on loopback); none by default.
#[derive(Debug, Clone, Default)]
pub struct AllowedHosts {
    names: Arc<[String]>,
}

impl AllowedHosts {
    /// These names (any case, a trailing dot or not).
    pub fn new<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self {
            names: names.into_iter().map(|n| normalize(n.as_ref())).collect(),
        }
    }

    /// Whether a request to `uri` with `headers`, on a connection that
    /// arrived on `local`, is for this server; why not, when it is not.
    pub fn check(&self, uri: &Uri, headers: &HeaderMap, local: IpAddr) -> Result<(), String> {
        let mut named = Vec::new();
        if let Some(authority) = uri.authority() {
            named.push(authority.clone());
        }
        for value in headers.get_all(HOST) {
            named.push(authority_of(value).ok_or("the Host header is not a host[:port]")?);
        }
        let Some(first) = named.first() else {
            return Err("the request names no host (Host or :authority)".into());
        };
        if let Some(refused) = named.iter().find(|a| !self.answers(a.host(), local)) {
            return Err(format!(
                "this server does not answer to the host {:?}: call it by its address, \
                 or add the name to its allowed_hosts (WAFT_ALLOWED_HOSTS)",
                clip(refused.host())
            ));
        }
        match headers.get(ORIGIN) {
            Some(origin) => self.check_origin(origin, first),
            None => Ok(()),
        }
    }

    fn answers(&self, host: &str, local: IpAddr) -> bool {
        let name = normalize(host);
        parse_address(&name).is_some()
            || (name == "localhost" && local.to_canonical().is_loopback())
            || self.names.contains(&name)
    }

    /// A page's request: from the origin it asks (same host and port) or
    /// from a configured name.
    fn check_origin(&self, origin: &HeaderValue, asked: &Authority) -> Result<(), String> {
        let refused = || {
            format!(
                "a page of {:?} may not call this server: only its own pages may \
                 (or those of a name in its allowed_hosts)",
                clip(origin.to_str().unwrap_or("?"))
            )
        };
        let uri: Uri = origin
            .to_str()
            .ok()
            .and_then(|o| o.parse().ok())
            .ok_or_else(refused)?;
        let (Some(scheme), Some(from)) = (uri.scheme_str(), uri.authority()) else {
            return Err(refused());
        };
        let default = if scheme == "https" { 443 } else { 80 };
        let same = normalize(from.host()) == normalize(asked.host())
            && from.port_u16().unwrap_or(default) == asked.port_u16().unwrap_or(default);
        if same || self.names.contains(&normalize(from.host())) {
            Ok(())
        } else {
            Err(refused())
        }
    }
}

fn normalize(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// A `Host` header's `host[:port]` (no user part, which it never has).
fn authority_of(value: &HeaderValue) -> Option<Authority> {
    let text = value.to_str().ok().filter(|t| !t.contains('@'))?;
    text.parse().ok()
}

/// What a refusal quotes of a name the client sent: enough to recognise.
fn clip(text: &str) -> &str {
    let end = text
        .char_indices()
        .nth(100)
        .map_or(text.len(), |(at, _)| at);
    &text[..end]
}

/// Checks every request's host before the layers inside it see it.
#[derive(Clone)]
pub(crate) struct HostLayer {
    pub(crate) hosts: AllowedHosts,
    /// The listener's address: where connections arrive when the
    /// connection itself does not say.
    pub(crate) bound: IpAddr,
}

impl HostLayer {
    pub(crate) fn new(hosts: AllowedHosts, bound: Option<IpAddr>) -> Self {
        Self {
            hosts,
            bound: bound.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
        }
    }
}

impl<S> Layer<S> for HostLayer {
    type Service = HostChecked<S>;

    fn layer(&self, inner: S) -> HostChecked<S> {
        HostChecked {
            inner,
            layer: self.clone(),
        }
    }
}

#[derive(Clone)]
pub(crate) struct HostChecked<S> {
    inner: S,
    layer: HostLayer,
}

impl<S, R> Service<Request<Body>> for HostChecked<S>
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
        let local = arrived_on(&request).unwrap_or(self.layer.bound);
        if let Err(why) = self
            .layer
            .hosts
            .check(request.uri(), request.headers(), local)
        {
            let refusal = refusal(request.headers(), why);
            return Box::pin(async move { Ok(refusal) });
        }
        let future = self.inner.call(request);
        Box::pin(async move { Ok(future.await?.map(Body::new)) })
    }
}

/// The local address the request's connection arrived on, when the
/// transport says.
fn arrived_on<B>(request: &Request<B>) -> Option<IpAddr> {
    let extensions = request.extensions();
    let plain = extensions.get::<TcpConnectInfo>();
    let tls = extensions.get::<TlsConnectInfo<TcpConnectInfo>>();
    plain
        .or(tls.map(TlsConnectInfo::get_ref))
        .and_then(TcpConnectInfo::local_addr)
        .map(|addr| addr.ip())
}

/// `PERMISSION_DENIED` to a gRPC or gRPC-web call (in the caller's own
/// content type), `403` to anything else.
fn refusal(headers: &HeaderMap, why: String) -> Response<Body> {
    let content_type = headers.get(CONTENT_TYPE);
    let grpc = content_type
        .and_then(|v| v.to_str().ok())
        .filter(|v| v.starts_with("application/grpc"));
    match (grpc, content_type) {
        (Some(_), Some(content_type)) => {
            let mut response = Status::permission_denied(why).into_http::<Body>();
            response
                .headers_mut()
                .insert(CONTENT_TYPE, content_type.clone());
            response
        }
        _ => {
            let mut response = Response::new(Body::new(format!("{why}\n")));
            *response.status_mut() = StatusCode::FORBIDDEN;
            let headers = response.headers_mut();
            headers.insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            headers.insert(
                "x-content-type-options",
                HeaderValue::from_static("nosniff"),
            );
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(hosts: &AllowedHosts, host: &str, origin: Option<&str>, local: &str) -> bool {
        let mut headers = HeaderMap::new();
        headers.insert(HOST, HeaderValue::from_str(host).unwrap());
        if let Some(origin) = origin {
            headers.insert(ORIGIN, HeaderValue::from_str(origin).unwrap());
        }
        let uri = Uri::from_static("/");
        hosts.check(&uri, &headers, local.parse().unwrap()).is_ok()
    }

    #[test]
    fn addresses_localhost_on_loopback_and_configured_names_are_answered() {
        let none = AllowedHosts::default();
        let named = AllowedHosts::new(["Waft.Internal."]);
        for host in ["127.0.0.1:7070", "10.1.2.3", "[::1]:7070", "[fd00::5]"] {
            assert!(check(&none, host, None, "0.0.0.0"), "{host}");
        }
        assert!(check(&none, "localhost:7070", None, "127.0.0.1"));
        assert!(check(&none, "LOCALHOST.", None, "::1"));
        assert!(check(&none, "localhost", None, "::ffff:127.0.0.1"));
        assert!(!check(&none, "localhost:7070", None, "10.0.0.5"));
        assert!(!check(&none, "waft.internal", None, "127.0.0.1"));
        assert!(check(&named, "waft.internal:7070", None, "10.0.0.5"));
        assert!(check(&named, "WAFT.internal.", None, "10.0.0.5"));
        assert!(!check(&named, "evil.waft.internal", None, "10.0.0.5"));
        assert!(!check(&named, "user@waft.internal", None, "10.0.0.5"));
    }

    #[test]
    fn an_origin_must_be_the_one_asked_for_or_a_configured_name() {
        let named = AllowedHosts::new(["dash.example"]);
        let ok = |host, origin| check(&named, host, Some(origin), "127.0.0.1");
        assert!(ok("127.0.0.1:7070", "http://127.0.0.1:7070"));
        assert!(ok("127.0.0.1", "http://127.0.0.1"));
        assert!(ok("127.0.0.1:443", "https://127.0.0.1"));
        assert!(ok("10.0.0.5:7070", "https://dash.example"));
        assert!(!ok("127.0.0.1:7070", "http://127.0.0.1:3000"));
        assert!(!ok("127.0.0.1:7070", "http://localhost:7070"));
        assert!(!ok("127.0.0.1:7070", "http://evil.example:7070"));
        assert!(!ok("127.0.0.1:7070", "null"));
        assert!(!ok("127.0.0.1:7070", "127.0.0.1:7070"));
    }

    #[test]
    fn a_refusal_is_a_status_to_a_call_and_a_403_to_a_page() {
        let mut headers = HeaderMap::new();
        let page = refusal(&headers, "no".into());
        assert_eq!(page.status(), StatusCode::FORBIDDEN);
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/grpc-web+proto"),
        );
        let call = refusal(&headers, "no".into());
        assert_eq!(call.status(), StatusCode::OK);
        assert_eq!(call.headers()["grpc-status"], "7");
        assert_eq!(call.headers()[CONTENT_TYPE], "application/grpc-web+proto");
    }
}
