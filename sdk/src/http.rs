//! Outbound HTTP from a lambda: a small blocking client over
//! `wasi:http/outgoing-handler`.
//!
//! A lambda reaches only what its deploy granted (`waft lambda deploy …
//! --allow-outbound PATTERN`); anything else fails with
//! [`HttpError::Denied`], and the task's log says what to grant. The host
//! also bounds the number of requests, the bytes of a response and every
//! wait, and cuts requests off the moment the execution stops.
//!
//! ```no_run
//! use waft_sdk::{http, lambda, Outcome, Task};
//!
//! #[lambda]
//! fn notify(task: Task) -> Result<Outcome, waft_sdk::Error> {
//!     let response = http::post("https://hooks.example.com/notify")
//!         .header("content-type", "application/json")
//!         .body(task.payload().to_vec())
//!         .send()?;
//!     match response.status() {
//!         200..=299 => Ok(Outcome::success()),
//!         status => Ok(Outcome::retry(format!("the hook answered {status}"))),
//!     }
//! }
//! ```
//!
//! Tasks run at least once, so a request may be repeated by a later
//! attempt. Every request carries an `Idempotency-Key` header, the same on
//! every attempt of a task (the task's [key](crate::Task::idempotency_key)
//! and the request's rank within the execution), so the receiving service
//! can tell a repeat; [`Request::idempotency_key`] turns it off or sets
//! another.
//!
//! This client is written on the raw `wasi:http` bindings rather than an
//! async crate: a lambda's handler is synchronous, the bindings block on a
//! pollable as well as any runtime would, and they add no executor to the
//! component.

use std::cell::Cell;
use std::fmt;
use std::time::Duration;

use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    ErrorCode, Fields, Method, OutgoingBody, OutgoingRequest, RequestOptions, Scheme,
};

thread_local! {
    /// The running task's key and the requests sent so far in this
    /// execution: the pieces of each request's idempotency key.
    static EXECUTION: Cell<Option<(&'static str, u32)>> = const { Cell::new(None) };
}

/// Called by the handler glue before and after the user's function.
pub(crate) fn begin_execution(task_key: &str) {
    // One short string per execution, and an instance runs one task: the
    // leak lasts as long as the instance.
    let key: &'static str = Box::leak(task_key.to_owned().into_boxed_str());
    EXECUTION.set(Some((key, 0)));
}

fn next_idempotency_key() -> Option<String> {
    EXECUTION.with(|cell| {
        let (key, sent) = cell.get()?;
        cell.set(Some((key, sent + 1)));
        Some(format!("{key}-{sent}"))
    })
}

/// A request to be sent; made by [`get`], [`post`] or [`Request::new`].
#[derive(Debug, Clone)]
#[must_use = "a request does nothing until it is sent"]
pub struct Request {
    method: String,
    url: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    timeout: Option<Duration>,
    idempotency_key: Option<Option<String>>,
    redirects: u8,
}

/// A `GET` request to `url`.
pub fn get(url: impl Into<String>) -> Request {
    Request::new("GET", url)
}

/// A `POST` request to `url`.
pub fn post(url: impl Into<String>) -> Request {
    Request::new("POST", url)
}

impl Request {
    /// A request with any method (`PUT`, `DELETE`, `PATCH`…).
    pub fn new(method: impl Into<String>, url: impl Into<String>) -> Self {
        Self {
            method: method.into(),
            url: url.into(),
            headers: Vec::new(),
            body: Vec::new(),
            timeout: None,
            idempotency_key: None,
            redirects: 5,
        }
    }

    /// Follows at most `n` redirects (default 5; 0: none). Each hop is a
    /// request of its own, checked against the lambda's grants.
    pub fn redirects(mut self, n: u8) -> Self {
        self.redirects = n;
        self
    }

    /// Adds a header.
    pub fn header(mut self, name: impl Into<String>, value: impl AsRef<[u8]>) -> Self {
        self.headers.push((name.into(), value.as_ref().to_vec()));
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Sets a JSON body and its content type.
    pub fn json<T: serde::Serialize>(self, value: &T) -> Result<Self, HttpError> {
        let body = serde_json::to_vec(value).map_err(|e| HttpError::Invalid(e.to_string()))?;
        Ok(self.header("content-type", "application/json").body(body))
    }

    /// Bounds each wait — to connect, for the first byte, between bytes —
    /// below what the lambda was granted (the host's bound holds anyway).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sends `key` as the `Idempotency-Key` instead of the task's, or no
    /// such header with `None`.
    pub fn idempotency_key(mut self, key: Option<String>) -> Self {
        self.idempotency_key = Some(key);
        self
    }

    /// Sends the request, follows redirects, and reads the whole response.
    pub fn send(mut self) -> Result<Response, HttpError> {
        loop {
            let response = self.clone().send_once()?;
            let location = match response.status {
                301 | 302 | 303 | 307 | 308 if self.redirects > 0 => response.header("location"),
                _ => None,
            };
            let Some(location) = location else {
                return Ok(response);
            };
            self.url = resolve_location(&self.url, location);
            self.redirects -= 1;
            if response.status == 303
                || (matches!(response.status, 301 | 302)
                    && self.method.eq_ignore_ascii_case("POST"))
            {
                self.method = "GET".into();
                self.body.clear();
            }
        }
    }

    fn send_once(self) -> Result<Response, HttpError> {
        let url = Url::parse(&self.url)?;
        let mut headers = self.headers;
        let key = match self.idempotency_key {
            Some(chosen) => chosen,
            None => next_idempotency_key(),
        };
        if let Some(key) = key
            && !headers
                .iter()
                .any(|(name, _)| name.eq_ignore_ascii_case("idempotency-key"))
        {
            headers.push(("idempotency-key".into(), key.into_bytes()));
        }
        let fields = Fields::from_list(&headers)
            .map_err(|e| HttpError::Invalid(format!("headers: {e:?}")))?;
        let request = OutgoingRequest::new(fields);
        let method = match self.method.to_ascii_uppercase().as_str() {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            "OPTIONS" => Method::Options,
            "PATCH" => Method::Patch,
            other => Method::Other(other.to_owned()),
        };
        let invalid = |what: &str| HttpError::Invalid(format!("{what} of {}", self.url));
        request
            .set_method(&method)
            .map_err(|()| invalid("the method"))?;
        request
            .set_scheme(Some(&if url.https {
                Scheme::Https
            } else {
                Scheme::Http
            }))
            .map_err(|()| invalid("the scheme"))?;
        request
            .set_authority(Some(url.authority))
            .map_err(|()| invalid("the host"))?;
        request
            .set_path_with_query(Some(&url.path))
            .map_err(|()| invalid("the path"))?;
        let body = request.body().map_err(|()| invalid("the body"))?;
        let options = self.timeout.map(|timeout| {
            let options = RequestOptions::new();
            let nanos = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
            // A host that does not support a timeout keeps its own.
            let _ = options.set_connect_timeout(Some(nanos));
            let _ = options.set_first_byte_timeout(Some(nanos));
            let _ = options.set_between_bytes_timeout(Some(nanos));
            options
        });
        let pending = outgoing_handler::handle(request, options).map_err(HttpError::from)?;
        // A request the host refuses or fails closes its body early: its
        // answer says why, so it comes before a failed write.
        let written = write_body(body, &self.body);

        pending.subscribe().block();
        let response = match pending.get() {
            Some(Ok(Ok(response))) => {
                written?;
                response
            }
            Some(Ok(Err(code))) => return Err(code.into()),
            Some(Err(())) | None => {
                return Err(HttpError::Failed("the response was lost".into()));
            }
        };
        let status = response.status();
        let headers = response
            .headers()
            .entries()
            .into_iter()
            .map(|(name, value)| (name, String::from_utf8_lossy(&value).into_owned()))
            .collect();
        let incoming = response
            .consume()
            .map_err(|()| HttpError::Failed("the response has no body".into()))?;
        let mut bytes = Vec::new();
        {
            let stream = incoming
                .stream()
                .map_err(|()| HttpError::Failed("the response body is gone".into()))?;
            loop {
                match stream.blocking_read(64 * 1024) {
                    Ok(chunk) => bytes.extend_from_slice(&chunk),
                    Err(wasip2::io::streams::StreamError::Closed) => break,
                    Err(wasip2::io::streams::StreamError::LastOperationFailed(error)) => {
                        return Err(match wasip2::http::types::http_error_code(&error) {
                            Some(code) => code.into(),
                            None => body_error(&error.to_debug_string()),
                        });
                    }
                }
            }
        }
        drop(wasip2::http::types::IncomingBody::finish(incoming));
        Ok(Response {
            status,
            headers,
            body: bytes,
        })
    }
}

/// A response body's failure that the host gave as text only: its first
/// line names it.
fn body_error(debug: &str) -> HttpError {
    let first = debug.lines().next().unwrap_or_default().trim();
    let lower = first.to_ascii_lowercase();
    if lower.contains("size exceeds limit") {
        HttpError::TooLarge
    } else if lower.contains("timeout") || lower.contains("timed out") {
        HttpError::Timeout
    } else {
        HttpError::Failed(first.to_owned())
    }
}

fn write_body(body: OutgoingBody, bytes: &[u8]) -> Result<(), HttpError> {
    {
        let stream = body
            .write()
            .map_err(|()| HttpError::Failed("cannot write the request body".into()))?;
        // `blocking-write-and-flush` takes at most 4096 bytes at a time.
        for chunk in bytes.chunks(4096) {
            stream
                .blocking_write_and_flush(chunk)
                .map_err(|e| HttpError::Failed(format!("writing the request body: {e:?}")))?;
        }
    }
    OutgoingBody::finish(body, None).map_err(HttpError::from)
}

/// A response, read whole.
#[derive(Debug, Clone)]
pub struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    /// The status code.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every header, in order.
    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
    }

    /// The body's bytes.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The body as UTF-8 text (invalid bytes replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body parsed as JSON.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, HttpError> {
        serde_json::from_slice(&self.body).map_err(|e| HttpError::Invalid(e.to_string()))
    }
}

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpError {
    /// The lambda is not granted this destination, or ran out of requests
    /// or connections; the task's log says what to grant.
    Denied,
    /// A wait ran out: to connect, for the first byte, or between bytes.
    Timeout,
    /// The response body was larger than the lambda may receive.
    TooLarge,
    /// The request cannot be made as written (a bad URL, say).
    Invalid(String),
    /// Anything else on the way: DNS, connection, TLS, protocol.
    Failed(String),
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::Denied => f.write_str("the request was refused: see the task's log"),
            HttpError::Timeout => f.write_str("the request timed out"),
            HttpError::TooLarge => f.write_str("the response was too large"),
            HttpError::Invalid(why) => write!(f, "invalid request: {why}"),
            HttpError::Failed(why) => write!(f, "the request failed: {why}"),
        }
    }
}

impl std::error::Error for HttpError {}

impl From<ErrorCode> for HttpError {
    fn from(code: ErrorCode) -> Self {
        match code {
            ErrorCode::HttpRequestDenied | ErrorCode::ConnectionLimitReached => HttpError::Denied,
            ErrorCode::ConnectionTimeout
            | ErrorCode::ConnectionReadTimeout
            | ErrorCode::ConnectionWriteTimeout
            | ErrorCode::HttpResponseTimeout
            | ErrorCode::DnsTimeout => HttpError::Timeout,
            ErrorCode::HttpResponseBodySize(_) => HttpError::TooLarge,
            ErrorCode::HttpRequestUriInvalid | ErrorCode::HttpRequestMethodInvalid => {
                HttpError::Invalid(format!("{code:?}"))
            }
            other => HttpError::Failed(format!("{other:?}")),
        }
    }
}

/// Where a redirect's `Location` points, from the URL that answered it.
fn resolve_location(base: &str, location: &str) -> String {
    if location.contains("://") {
        return location.to_owned();
    }
    let (scheme, rest) = base.split_once("://").unwrap_or(("https", base));
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    if let Some(other_host) = location.strip_prefix("//") {
        return format!("{scheme}://{other_host}");
    }
    if location.starts_with('/') {
        return format!("{scheme}://{authority}{location}");
    }
    let path = &rest[authority.len()..];
    let directory = &path[..path.rfind('/').map_or(0, |i| i + 1)];
    let directory = if directory.is_empty() { "/" } else { directory };
    format!("{scheme}://{authority}{directory}{location}")
}

/// The parts of a URL the request needs.
struct Url<'a> {
    https: bool,
    authority: &'a str,
    path: String,
}

impl<'a> Url<'a> {
    fn parse(url: &'a str) -> Result<Self, HttpError> {
        let invalid = || HttpError::Invalid(format!("{url:?} is not an http(s) URL"));
        let (scheme, rest) = url.split_once("://").ok_or_else(invalid)?;
        let https = match scheme.to_ascii_lowercase().as_str() {
            "https" => true,
            "http" => false,
            _ => return Err(invalid()),
        };
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(end);
        let path = path.split('#').next().unwrap_or_default();
        if authority.is_empty() {
            return Err(invalid());
        }
        let path = match path {
            "" => "/".to_owned(),
            query if query.starts_with('?') => format!("/{query}"),
            path => path.to_owned(),
        };
        Ok(Self {
            https,
            authority,
            path,
        })
    }
}
