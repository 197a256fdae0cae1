//! Sending one admitted request: resolve, check the address, connect,
//! TLS, HTTP/1.1, and a response body held to its limits — every step
//! raced against the kill switch and clamped to the task's deadline.

use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use rustls::pki_types::ServerName;
use rustls::pki_types::pem::PemObject;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;
use waft_core::OutboundLimits;
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody};

use super::{Connections, Destination, OutboundRecord, record};
use crate::KillSwitch;
use crate::log::{LogSink, LogSource};

/// How outbound HTTPS is verified: the system's roots, plus a CA file the
/// node may add (a private CA, or a test's).
pub(crate) struct Tls {
    connector: tokio_rustls::TlsConnector,
}

impl Tls {
    /// Reads the system's roots and `extra_ca` (PEM) if given.
    pub(crate) fn new(extra_ca: Option<&Path>) -> Result<Self, String> {
        let mut roots = rustls::RootCertStore::empty();
        // Unreadable system certificates are skipped; with none at all,
        // only `extra_ca` is trusted.
        for cert in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(cert);
        }
        if let Some(path) = extra_ca {
            let certs = rustls::pki_types::CertificateDer::pem_file_iter(path)
                .map_err(|e| format!("cannot read the CA file {}: {e}", path.display()))?;
            for cert in certs {
                let cert =
                    cert.map_err(|e| format!("bad certificate in {}: {e}", path.display()))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("bad certificate in {}: {e}", path.display()))?;
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Self {
            connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
        })
    }
}

trait Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Stream for T {}

/// A connection's stream and the permits it was opened under. Fields drop
/// in order: the socket is closed before its permits go back, however the
/// connection ends (answered, refused, timed out, or dropped with its
/// execution), so the connections open never exceed the permits, even for
/// the instant between the two.
struct Permitted {
    stream: Box<dyn Stream>,
    _permits: [OwnedSemaphorePermit; 2],
}

impl AsyncRead for Permitted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Permitted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// An admitted request and what sending it needs.
pub(super) struct Request {
    pub http: http::Request<WasiBody>,
    pub limits: OutboundLimits,
    pub options: RequestOptions,
    pub deadline: Instant,
    pub tls: Arc<Tls>,
    pub kill: KillSwitch,
    pub log: LogSink,
    pub open: Arc<Semaphore>,
    pub shared: Arc<Connections>,
    pub records: Arc<Mutex<Vec<OutboundRecord>>>,
}

pub(super) type Sent = (
    http::Response<WasiBody>,
    Box<dyn Future<Output = Result<(), Error>> + Send>,
);

impl Request {
    pub(super) async fn send(self, to: Destination) -> Result<Sent, Error> {
        let started = Instant::now();
        let (records, host) = (self.records.clone(), to.host.clone());
        let answer = self.exchange(&to).await;
        let outcome = match &answer {
            Ok((response, _)) => status_class(response.status()),
            Err(Error::HttpRequestDenied) => "denied",
            Err(_) => "failed",
        };
        // A denial was recorded where it was decided.
        if outcome != "denied" {
            record(&records, &host, outcome, started.elapsed());
        }
        answer
    }

    /// Opens a connection under the permits, sends the request and hands
    /// back the answer with its body held to the limits, and the future
    /// that drives the connection until the body is read.
    async fn exchange(self, to: &Destination) -> Result<Sent, Error> {
        let Request {
            http,
            limits,
            options,
            deadline,
            tls,
            kill,
            log,
            open,
            shared,
            ..
        } = self;
        let permits = permits(&open, &shared, &limits, to, &log)?;
        let timeouts = Timeouts::new(&limits, &options, deadline);
        let (sender, conn) = tokio::select! {
            biased;
            () = kill.killed() => return Err(Error::ConnectionTerminated),
            connected = tokio::time::timeout(timeouts.connect, connect(to, &tls, &log, permits)) => {
                connected.map_err(|_| Error::ConnectionTimeout)??
            }
        };
        let (response, conn) =
            first_answer(sender, conn, path_only(http)?, &kill, timeouts.first_byte).await?;
        let response = held_to_limits(response, &limits, to, &log, timeouts.between_bytes, &kill)?;
        let io = async move {
            let Some(conn) = conn else {
                return Ok(());
            };
            tokio::select! {
                biased;
                () = kill.killed() => Err(Error::ConnectionTerminated),
                done = conn => done.map_err(Error::from),
            }
        };
        Ok((response, Box::new(io)))
    }
}

/// The request's time limits: the lambda's own where it asks for shorter
/// ones than it was granted, and never past the task's deadline.
struct Timeouts {
    connect: Duration,
    first_byte: Duration,
    between_bytes: Duration,
}

impl Timeouts {
    fn new(limits: &OutboundLimits, options: &RequestOptions, deadline: Instant) -> Self {
        let timeout = |granted: Duration, asked: Option<Duration>| {
            let left = deadline.saturating_duration_since(Instant::now());
            asked.map_or(granted, |asked| asked.min(granted)).min(left)
        };
        Self {
            connect: timeout(limits.connect_timeout, options.connect_timeout),
            first_byte: timeout(limits.first_byte_timeout, options.first_byte_timeout),
            between_bytes: timeout(limits.between_bytes_timeout, options.between_bytes_timeout),
        }
    }
}

type Connection = hyper::client::conn::http1::Connection<TokioIo<Box<dyn Stream>>, WasiBody>;
type Sender = hyper::client::conn::http1::SendRequest<WasiBody>;

/// Resolves, connects, speaks TLS to an `https` destination, and
/// handshakes HTTP/1.1; the stream keeps the connection's `permits`.
async fn connect(
    to: &Destination,
    tls: &Tls,
    log: &LogSink,
    permits: [OwnedSemaphorePermit; 2],
) -> Result<(Sender, Connection), Error> {
    let address = resolve(to, log).await?;
    let stream = TcpStream::connect(address).await.map_err(Error::Connect)?;
    let stream: Box<dyn Stream> = if to.https {
        let name =
            ServerName::try_from(to.host.clone()).map_err(|_| Error::HttpRequestUriInvalid)?;
        Box::new(
            tls.connector
                .connect(name, stream)
                .await
                .map_err(Error::Tls)?,
        )
    } else {
        Box::new(stream)
    };
    let stream: Box<dyn Stream> = Box::new(Permitted {
        stream,
        _permits: permits,
    });
    Ok(hyper::client::conn::http1::handshake::<_, WasiBody>(TokioIo::new(stream)).await?)
}

/// The request as it goes on the wire: the request line carries the path
/// only; the Host header names the destination.
fn path_only(mut http: http::Request<WasiBody>) -> Result<http::Request<WasiBody>, Error> {
    let path = http
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    *http.uri_mut() = path.parse().map_err(|_| Error::HttpRequestUriInvalid)?;
    Ok(http)
}

/// Sends the request and waits for the answer's head, driving the
/// connection meanwhile; a kill or the first-byte timeout drops both. The
/// connection comes back unless it already ended.
async fn first_answer(
    mut sender: Sender,
    conn: Connection,
    http: http::Request<WasiBody>,
    kill: &KillSwitch,
    first_byte_timeout: Duration,
) -> Result<(http::Response<Incoming>, Option<Pin<Box<Connection>>>), Error> {
    let mut conn = Box::pin(conn);
    let exchange = sender.send_request(http);
    tokio::pin!(exchange);
    let first_byte = tokio::time::sleep(first_byte_timeout);
    tokio::pin!(first_byte);
    let mut driving = true;
    let response = loop {
        tokio::select! {
            biased;
            () = kill.killed() => return Err(Error::ConnectionTerminated),
            () = &mut first_byte => return Err(Error::ConnectionReadTimeout),
            response = &mut exchange => break response?,
            done = &mut conn, if driving => {
                driving = false;
                done?;
            }
        }
    };
    Ok((response, driving.then_some(conn)))
}

/// The answer with its body held to the response limit, the between-bytes
/// timeout and the kill switch; refused outright when its declared length
/// is over the limit.
fn held_to_limits(
    response: http::Response<Incoming>,
    limits: &OutboundLimits,
    to: &Destination,
    log: &LogSink,
    between_bytes: Duration,
    kill: &KillSwitch,
) -> Result<http::Response<WasiBody>, Error> {
    let max = limits.max_response.bytes();
    if let Some(length) = response.body().size_hint().exact()
        && length > max
    {
        log.record(
            LogSource::Waft,
            format!(
                "outbound response refused: {} sent {length} bytes; the limit is {} \
                 (raise --outbound-max-response)",
                to.target, limits.max_response
            ),
            Vec::new(),
        );
        return Err(Error::HttpResponseBodySize(Some(length)));
    }
    Ok(response.map(|incoming| {
        Limited {
            incoming,
            left: max,
            limit: (limits.max_response, to.target.clone(), log.clone()),
            between: between_bytes,
            idle: Box::pin(tokio::time::sleep(between_bytes)),
            killed: Box::pin(kill.clone().killed_owned()),
        }
        .boxed_unsync()
    }))
}

/// The permits to open one more connection, the execution's and the
/// executor's; when either bound is met, a refusal the task's log explains.
fn permits(
    open: &Arc<Semaphore>,
    shared: &Connections,
    limits: &OutboundLimits,
    to: &Destination,
    log: &LogSink,
) -> Result<[OwnedSemaphorePermit; 2], Error> {
    let refuse = |why: String| {
        log.record(
            LogSource::Waft,
            format!("outbound request refused: {}: {why}", to.target),
            Vec::new(),
        );
        Error::ConnectionLimitReached
    };
    let Ok(own) = open.clone().try_acquire_owned() else {
        return Err(refuse(format!(
            "{} requests are open already (raise --outbound-max-connections)",
            limits.max_connections
        )));
    };
    let Some(executors) = shared.try_open() else {
        return Err(refuse(format!(
            "the executor has {} outbound connections open for all tasks together, \
             its limit; retry later",
            shared.max()
        )));
    };
    Ok([own, executors])
}

/// Resolves the destination and picks the first address it may reach; a
/// name that resolves only to addresses it may not is refused.
async fn resolve(to: &Destination, log: &LogSink) -> Result<SocketAddr, Error> {
    let addresses: Vec<SocketAddr> = if to.is_address() {
        let ip = waft_core::grants::parse_address(&to.host).ok_or(Error::HttpRequestUriInvalid)?;
        vec![SocketAddr::new(ip, to.port)]
    } else {
        tokio::net::lookup_host((to.host.as_str(), to.port))
            .await
            .map_err(|_| Error::DnsError {
                rcode: Some("unresolved".into()),
                info_code: None,
            })?
            .collect()
    };
    if let Some(address) = addresses.iter().find(|a| to.may_reach(a.ip())) {
        return Ok(*address);
    }
    let Some(first) = addresses.first() else {
        return Err(Error::DestinationNotFound);
    };
    let ip = first.ip();
    let named = waft_core::OutboundPattern::suggest(
        if to.https { "https" } else { "http" },
        &ip.to_string(),
        to.port,
    );
    let through = if to.is_address() {
        String::new()
    } else {
        format!(" (what {} resolves to)", to.host)
    };
    log.record(
        LogSource::Waft,
        format!(
            "outbound request refused: {}: {ip}{through} is not a public address; \
             only a pattern naming the address reaches it (--allow-outbound {named})",
            to.target
        ),
        Vec::new(),
    );
    Err(Error::HttpRequestDenied)
}

fn status_class(status: http::StatusCode) -> &'static str {
    match status.as_u16() {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}

/// A response body held to the byte limit and the between-bytes timeout,
/// and cut off by the kill switch.
struct Limited {
    incoming: Incoming,
    left: u64,
    /// The limit, the destination and the log, to say why a body stopped.
    limit: (waft_core::ByteSize, String, LogSink),
    between: Duration,
    idle: Pin<Box<Sleep>>,
    killed: Pin<Box<dyn Future<Output = ()> + Send>>,
}

impl Body for Limited {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        if self.killed.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(Error::ConnectionTerminated)));
        }
        match Pin::new(&mut self.incoming).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let size = data.len() as u64;
                    if size > self.left {
                        let (max, target, log) = &self.limit;
                        log.record(
                            LogSource::Waft,
                            format!(
                                "outbound response cut off: {target} sent more than the limit \
                                 of {max} (raise --outbound-max-response)"
                            ),
                            Vec::new(),
                        );
                        return Poll::Ready(Some(Err(Error::HttpResponseBodySize(None))));
                    }
                    self.left -= size;
                }
                let next = tokio::time::Instant::now() + self.between;
                self.idle.as_mut().reset(next);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(error))) => Poll::Ready(Some(Err(error.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => match self.idle.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(Error::ConnectionReadTimeout))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.incoming.size_hint()
    }
}
