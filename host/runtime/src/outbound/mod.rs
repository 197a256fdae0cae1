//! Outbound HTTP for lambdas: `wasi:http/outgoing-handler`, through Waft's
//! own sender.
//!
//! Deny by default. Every request is checked before any I/O against the
//! lambda's allow-list ([`Grants`]), the execution's request budget and
//! whether the instance still runs; a redirect is a request of its own and
//! is checked the same way. Names are resolved here, not by the OS on the
//! way to `connect`, so the address connected to is the address checked:
//! an address that is not global is reached only when a pattern names it.
//! A refusal reaches the guest as `HttpRequestDenied` and the task's log
//! says what was refused and what to add to the list.
//!
//! Requests end with the instance: none starts once the kill switch has
//! passed, and one in flight — sending its body, waiting, streaming the
//! response — is cut off, its connection dropped, the moment it does.
//!
//! Connections are bounded twice: per execution (the lambda's
//! `max_connections`) and across every execution of the runtime
//! ([`Connections`], `RuntimeConfig::max_outbound_connections`), so that
//! lambdas together cannot take the file descriptors the executor needs
//! for its own connections. A request over either bound is refused at once
//! rather than queued — a queue would only hold the guest until its
//! deadline while others keep the connections — and the task's log says
//! which bound it met.
//!
//! Each admitted request has a client span, a child of the execution's
//! (OpenTelemetry's HTTP conventions: named by its method, with
//! `http.request.method`, `url.full` as redacted, `server.address` and
//! `http.response.status_code`). Its `traceparent` is added to the
//! request only on the way out, after the journal has matched it, so a
//! replay matches what the first attempt sent whatever the trace.

mod durable;
mod send;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use tracing::Instrument as _;
use waft_core::grants::{is_global, parse_address};
use waft_core::{Grants, OutboundPattern};
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

use crate::KillSwitch;
use crate::durable::Journal;
use crate::log::{LogSink, LogSource};

pub(crate) use send::Tls;

/// One outbound request of an execution, for metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboundRecord {
    /// The destination's host, as the lambda named it.
    pub host: String,
    /// `2xx`…`5xx` for an answer, `denied` for a refusal, `failed` for an
    /// error on the way (connect, TLS, a timeout, a limit).
    pub outcome: &'static str,
    pub duration: Duration,
}

/// The outbound connections every execution of a runtime shares: one
/// permit per open connection.
pub(crate) struct Connections {
    open: Arc<Semaphore>,
    max: usize,
}

impl Connections {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            open: Arc::new(Semaphore::new(max)),
            max,
        }
    }

    /// The most connections open at once.
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// A permit for one more connection, if the bound leaves room.
    pub(crate) fn try_open(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.open.clone().try_acquire_owned().ok()
    }
}

/// What one execution's requests share.
pub(crate) struct Outbound {
    grants: Arc<Grants>,
    tls: Arc<Tls>,
    kill: KillSwitch,
    log: LogSink,
    deadline: Instant,
    sent: u32,
    open: Arc<Semaphore>,
    shared: Arc<Connections>,
    records: Arc<Mutex<Vec<OutboundRecord>>>,
    journal: Journal,
    /// Request bodies held to be matched against the journal.
    held: Arc<durable::HeldBodies>,
}

impl Outbound {
    pub(crate) fn new(
        grants: Arc<Grants>,
        tls: Arc<Tls>,
        shared: Arc<Connections>,
        kill: KillSwitch,
        log: LogSink,
        deadline: Instant,
        journal: Journal,
    ) -> Self {
        let open = Arc::new(Semaphore::new(
            grants.outbound_limits.max_connections as usize,
        ));
        Self {
            grants,
            tls,
            kill,
            log,
            deadline,
            sent: 0,
            open,
            shared,
            records: Arc::default(),
            journal,
            held: Arc::default(),
        }
    }

    /// The requests so far, for the execution's record.
    pub(crate) fn records(&self) -> Vec<OutboundRecord> {
        self.records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Refuses a request, in the task's log and to the guest.
    fn deny(&self, host: &str, why: String) -> Error {
        self.log.record(
            LogSource::Waft,
            format!("outbound request refused: {why}"),
            Vec::new(),
        );
        record(&self.records, host, "denied", Duration::ZERO);
        Error::HttpRequestDenied
    }

    /// The checks that need no I/O: the instance runs, the budget holds, a
    /// pattern allows the destination. Answers where to go.
    fn admit(&mut self, request: &http::Request<WasiBody>) -> Result<Destination, Error> {
        let uri = request.uri();
        let scheme = uri.scheme_str().unwrap_or("https").to_ascii_lowercase();
        let host = uri
            .host()
            .map(|h| {
                h.trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_ascii_lowercase()
            })
            .unwrap_or_default();
        if let Some(reason) = self.kill.reason() {
            return Err(self.deny(&host, format!("the execution was stopped ({reason})")));
        }
        let port = match (uri.port_u16(), scheme.as_str()) {
            (Some(port), _) => port,
            (None, "http") => 80,
            (None, "https") => 443,
            (None, other) => {
                return Err(self.deny(&host, format!("the scheme {other:?} is not http or https")));
            }
        };
        let target = format!("{scheme}://{}", authority(&host, port));
        let limits = self.grants.outbound_limits;
        if self.sent >= limits.max_requests {
            return Err(self.deny(
                &host,
                format!(
                    "{target}: the execution already sent its {} requests \
                     (raise --outbound-max-requests)",
                    limits.max_requests
                ),
            ));
        }
        let patterns: Vec<OutboundPattern> = self
            .grants
            .outbound_matches(&scheme, &host, port)
            .cloned()
            .collect();
        if patterns.is_empty() {
            let hint = OutboundPattern::suggest(&scheme, &host, port);
            let why = if self.grants.outbound.is_empty() {
                format!(
                    "{target}: the lambda is granted no network; to allow it, deploy with --allow-outbound {hint}"
                )
            } else {
                format!(
                    "{target} is not on the lambda's allow-list; to allow it, deploy with --allow-outbound {hint}"
                )
            };
            return Err(self.deny(&host, why));
        }
        self.sent += 1;
        Ok(Destination {
            https: scheme == "https",
            host,
            port,
            target,
            patterns,
        })
    }
}

/// Where an admitted request goes, and the patterns that allowed it.
struct Destination {
    https: bool,
    /// Lowercase; an address without brackets.
    host: String,
    port: u16,
    /// `scheme://host:port`, for messages.
    target: String,
    patterns: Vec<OutboundPattern>,
}

impl Destination {
    /// Whether the request may connect to `ip`: a global address, or one a
    /// pattern that allowed the request names.
    fn may_reach(&self, ip: std::net::IpAddr) -> bool {
        is_global(ip) || self.patterns.iter().any(|p| p.names_address(ip))
    }

    /// Whether the host is an address rather than a name.
    fn is_address(&self) -> bool {
        parse_address(&self.host).is_some()
    }
}

fn authority(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The most requests an execution's record keeps: refusals cost the lambda
/// nothing, so one looping on a refused destination would otherwise grow
/// the host's memory without bound. Later ones are not recorded (nor
/// counted in the metrics); the log says so through its own budget.
const MAX_RECORDS: usize = 1024;

fn record(
    records: &Mutex<Vec<OutboundRecord>>,
    host: &str,
    outcome: &'static str,
    duration: Duration,
) {
    let mut records = records.lock().unwrap_or_else(PoisonError::into_inner);
    if records.len() >= MAX_RECORDS {
        return;
    }
    records.push(OutboundRecord {
        host: host.to_owned(),
        outcome,
        duration,
    });
}

type Sent = Box<
    dyn Future<
            Output = Result<
                (
                    http::Response<WasiBody>,
                    Box<dyn Future<Output = Result<(), Error>> + Send>,
                ),
                Error,
            >,
        > + Send,
>;

impl WasiHttpHooks for Outbound {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _response_errors: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> Sent {
        let admitted = match self.admit(&request) {
            Ok(destination) => destination,
            Err(refusal) => {
                discard(request.into_body(), self.kill.clone());
                return Box::new(async move { Err(refusal) });
            }
        };
        // A refusal above reached nothing and is decided again on replay;
        // an admitted request takes its place in the journal.
        let place = match self.journal.reserve(durable::HANDLE) {
            Ok(place) => place,
            Err(halt) => {
                discard(request.into_body(), self.kill.clone());
                let error = Error::InternalError(Some(halt.to_string()));
                return Box::new(async move { Err(error) });
            }
        };
        let request = send::Request {
            http: request,
            limits: self.grants.outbound_limits,
            options: options.unwrap_or_default(),
            deadline: self.deadline,
            tls: self.tls.clone(),
            kill: self.kill.clone(),
            log: self.log.clone(),
            open: self.open.clone(),
            shared: self.shared.clone(),
            records: self.records.clone(),
        };
        let (journal, held) = (self.journal.clone(), self.held.clone());
        // Made here, in the guest's call, where the execution's span is
        // current; the exchange may be polled elsewhere.
        let span = tracing::debug_span!(
            "http",
            otel.name = request.http.method().as_str(),
            otel.kind = "client",
            otel.status_code = tracing::field::Empty,
            http.request.method = request.http.method().as_str(),
            url.full = tracing::field::Empty,
            server.address = request.http.uri().host().unwrap_or_default(),
            http.response.status_code = tracing::field::Empty,
            waft.replayed = tracing::field::Empty,
        );
        Box::new(durable::exchange(request, admitted, place, journal, held).instrument(span))
    }
}

/// Reads a refused request's body to its end and drops it, until the
/// instance stops: a guest that streams its body while it waits for the
/// answer then learns of the refusal from the answer, as it should, rather
/// than from a write that failed for no reason it can see (some runtimes,
/// JavaScript's among them, abort on that).
fn discard(mut body: WasiBody, kill: KillSwitch) {
    use http_body_util::BodyExt as _;
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let drained = async { while let Some(Ok(_)) = body.frame().await {} };
        tokio::select! {
            () = kill.killed() => {}
            () = drained => {}
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_executions_record_is_bounded() {
        let records = Mutex::new(Vec::new());
        for _ in 0..MAX_RECORDS * 3 {
            record(&records, "refused.example", "denied", Duration::ZERO);
        }
        assert_eq!(records.lock().unwrap().len(), MAX_RECORDS);
    }
}
