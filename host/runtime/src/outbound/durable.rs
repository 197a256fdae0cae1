//! Outbound HTTP, journaled: a request is matched by its method, URL,
//! headers and body; a replayed one is answered from the journal without
//! touching the network, and a live one's whole answer — head, body, and
//! the error that cut the body off, if any — is written to the store
//! before the lambda sees any of it (a durability point).
//!
//! So a live answer reaches the lambda once its body has been read, not
//! as it streams; and a request still in flight when the execution ended
//! is a hole in the journal, made again on replay with the same
//! `Idempotency-Key` (the SDKs number requests in call order, replayed
//! ones included).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use serde::{Deserialize, Serialize};
use waft_core::ByteSize;
use waft_core::limits::MAX_JOURNAL_ANSWER;
use wasmtime_wasi_http::{Error, WasiBody};

use super::Destination;
use super::send::{self, Sent};
use crate::durable::{Halt, Journal, Outside, Reserved, Step, digest, encode};
use crate::log::{LogSink, LogSource};

/// The call's name in the journal.
pub(super) const HANDLE: &str = "wasi:http/outgoing-handler.handle";

/// The largest request body a lambda may send (15 MiB): it is held whole,
/// to be matched against the journal before it goes out.
pub(super) const MAX_REQUEST_BODY: usize = MAX_JOURNAL_ANSWER;

/// The most request-body bytes the host holds for one execution at once,
/// all its requests together (30 MiB): a lambda opening request after
/// request would otherwise park bodies on the host without bound, before
/// any connection limit applies.
pub(super) const MAX_HELD: usize = 2 * MAX_REQUEST_BODY;

/// Request-body bytes an execution's requests hold now.
#[derive(Default)]
pub(super) struct HeldBodies {
    bytes: std::sync::atomic::AtomicUsize,
}

/// Bytes taken of an execution's [`HeldBodies`], given back when dropped.
struct Holding<'a> {
    held: &'a HeldBodies,
    bytes: usize,
}

impl Holding<'_> {
    /// Takes `more` bytes; false, taking none, past [`MAX_HELD`].
    fn take(&mut self, more: usize) -> bool {
        use std::sync::atomic::Ordering;
        let taken = self
            .held
            .bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| {
                (now + more <= MAX_HELD).then_some(now + more)
            });
        if taken.is_ok() {
            self.bytes += more;
        }
        taken.is_ok()
    }
}

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        self.held
            .bytes
            .fetch_sub(self.bytes, std::sync::atomic::Ordering::AcqRel);
    }
}

/// An answer as the journal keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Answer {
    Response {
        status: u16,
        headers: Vec<(String, Vec<u8>)>,
        body: Vec<u8>,
        /// What cut the body off, after `body`.
        cut: Option<Failure>,
    },
    Failed(Failure),
}

/// Why a request got no answer (or only part of one), as the journal keeps
/// it: the lambda sees the same error live and replayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum Failure {
    Denied,
    DnsError,
    DestinationNotFound,
    ConnectionRefused,
    ConnectionTerminated,
    ConnectionTimeout,
    ConnectionReadTimeout,
    ConnectionLimitReached,
    TlsError,
    RequestBodyTooLarge,
    ResponseBodyTooLarge,
    UriInvalid,
    Protocol,
}

impl Failure {
    fn of(error: &Error) -> Self {
        match error {
            Error::HttpRequestDenied => Self::Denied,
            Error::DnsError { .. } | Error::DnsTimeout => Self::DnsError,
            Error::DestinationNotFound => Self::DestinationNotFound,
            Error::Connect(_) | Error::ConnectionRefused => Self::ConnectionRefused,
            Error::ConnectionTimeout => Self::ConnectionTimeout,
            Error::ConnectionReadTimeout | Error::HttpResponseTimeout => {
                Self::ConnectionReadTimeout
            }
            Error::ConnectionLimitReached => Self::ConnectionLimitReached,
            Error::Tls(_) | Error::TlsProtocolError | Error::TlsCertificateError => Self::TlsError,
            Error::HttpRequestBodySize(_) => Self::RequestBodyTooLarge,
            Error::HttpResponseBodySize(_) => Self::ResponseBodyTooLarge,
            Error::HttpRequestUriInvalid => Self::UriInvalid,
            Error::ConnectionTerminated => Self::ConnectionTerminated,
            _ => Self::Protocol,
        }
    }

    fn error(self) -> Error {
        match self {
            Self::Denied => Error::HttpRequestDenied,
            Self::DnsError => Error::DnsError {
                rcode: Some("unresolved".into()),
                info_code: None,
            },
            Self::DestinationNotFound => Error::DestinationNotFound,
            Self::ConnectionRefused => Error::ConnectionRefused,
            Self::ConnectionTerminated => Error::ConnectionTerminated,
            Self::ConnectionTimeout => Error::ConnectionTimeout,
            Self::ConnectionReadTimeout => Error::ConnectionReadTimeout,
            Self::ConnectionLimitReached => Error::ConnectionLimitReached,
            Self::TlsError => Error::TlsProtocolError,
            Self::RequestBodyTooLarge => Error::HttpRequestBodySize(None),
            Self::ResponseBodyTooLarge => Error::HttpResponseBodySize(None),
            Self::UriInvalid => Error::HttpRequestUriInvalid,
            Self::Protocol => Error::HttpProtocolError,
        }
    }
}

/// Sends `request` to `to` in its place `place` of the journal, or answers
/// it from there.
pub(super) async fn exchange(
    request: send::Request,
    to: Destination,
    place: Reserved,
    journal: Journal,
    held: Arc<HeldBodies>,
) -> Result<Sent, Error> {
    let log = request.log.clone();
    let (mut parts, body) = request.http.into_parts();
    let seq = place.seq();
    let mut holding = Holding {
        held: &held,
        bytes: 0,
    };
    let body = whole(body, &log, &mut holding).await?;
    // Matched without the secrets' values: a secret rotated between two
    // attempts does not make the same request another.
    let redactor = journal.redactor();
    let arguments = (
        parts.method.as_str(),
        redactor.text(parts.uri.to_string()),
        headers(&parts.headers)
            .into_iter()
            .map(|(name, value)| (name, redactor.bytes(value)))
            .collect::<Vec<_>>(),
        redactor.bytes(body.to_vec()),
    );
    let digest = digest(HANDLE, &arguments);
    let span = tracing::Span::current();
    span.record("url.full", arguments.1.as_str());
    let ticket = match place.resolve(&digest) {
        Err(halt) => return Err(halted(&halt)),
        Ok(Step::Replay { seq, answer }) => {
            let answer: Answer = journal
                .decode(seq, HANDLE, &answer)
                .map_err(|h| halted(&h))?;
            journal.replayed_outside(seq, answer.outside());
            answer.note(&span, true);
            return answer.into_response();
        }
        Ok(Step::Live(ticket)) => ticket,
    };
    // Nothing goes out before every call before it is matched.
    journal
        .settled(ticket.seq())
        .await
        .map_err(|h| halted(&h))?;
    // The children the lambda scheduled before this request exist before
    // anyone can hear of it.
    if let Err(lost) = journal.host().settle().await {
        return Err(Error::InternalError(Some(lost.reason)));
    }
    // Redacted as sent, then decoded (and redacted again when recorded), so
    // that the redaction of secrets (an exact match) finds one the URL
    // carries raw or percent-encoded.
    let uri = journal.redactor().text(parts.uri.to_string());
    let summary_head = format!("{} {}", parts.method, percent_decoded(&uri));
    // Only now, past the journal's match: the span differs per attempt.
    waft_telemetry::inject(&span, &mut parts.headers);
    let http = http::Request::from_parts(parts, full(body.freeze(), None));
    let live = send::Request { http, ..request };
    let answer = match live.send(to).await {
        Ok((response, io)) => read(response, io).await,
        Err(error) => Answer::Failed(Failure::of(&error)),
    };
    answer.note(&span, false);
    let summary = format!("{summary_head} → {}", answer.summary());
    journal
        .record(ticket, &digest, encode(&answer), summary, answer.outside())
        .map_err(|h| halted(&h))?;
    if journal.commit().await.is_err() {
        log.record(
            LogSource::Waft,
            format!("outbound answer withheld: entry {seq} of the journal could not be written"),
            Vec::new(),
        );
        return Err(Error::ConnectionTerminated);
    }
    answer.into_response()
}

/// The request's body, whole, within [`MAX_REQUEST_BODY`] and what the
/// execution may hold.
async fn whole(
    mut body: WasiBody,
    log: &LogSink,
    holding: &mut Holding<'_>,
) -> Result<BytesMut, Error> {
    let mut bytes = BytesMut::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            if !holding.take(data.len()) {
                log.record(
                    LogSource::Waft,
                    format!(
                        "outbound request refused: the execution's requests hold {} of \
                         request bodies already, the most it may",
                        ByteSize::b(MAX_HELD as u64)
                    ),
                    Vec::new(),
                );
                return Err(Error::HttpRequestBodySize(Some(bytes.len() as u64)));
            }
            if bytes.len() + data.len() > MAX_REQUEST_BODY {
                log.record(
                    LogSource::Waft,
                    format!(
                        "outbound request refused: its body is over {}, the most a \
                         journaled request sends",
                        ByteSize::b(MAX_REQUEST_BODY as u64)
                    ),
                    Vec::new(),
                );
                return Err(Error::HttpRequestBodySize(Some(bytes.len() as u64)));
            }
            bytes.extend_from_slice(&data);
        }
    }
    Ok(bytes)
}

/// Reads an answer whole, driving its connection meanwhile.
async fn read(
    response: http::Response<WasiBody>,
    io: Box<dyn Future<Output = Result<(), Error>> + Send>,
) -> Answer {
    let (parts, mut body) = response.into_parts();
    let mut io = Box::into_pin(io);
    let mut driving = true;
    let mut bytes = Vec::new();
    let cut = loop {
        tokio::select! {
            frame = body.frame() => match frame {
                None => break None,
                Some(Err(error)) => break Some(Failure::of(&error)),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        if bytes.len() + data.len() > MAX_JOURNAL_ANSWER {
                            break Some(Failure::ResponseBodyTooLarge);
                        }
                        bytes.extend_from_slice(&data);
                    }
                }
            },
            done = &mut io, if driving => {
                driving = false;
                if let Err(error) = done {
                    break Some(Failure::of(&error));
                }
            }
        }
    };
    Answer::Response {
        status: parts.status.as_u16(),
        headers: headers(&parts.headers),
        body: bytes,
        cut,
    }
}

fn headers(map: &http::HeaderMap) -> Vec<(String, Vec<u8>)> {
    map.iter()
        .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec()))
        .collect()
}

fn halted(halt: &Halt) -> Error {
    Error::InternalError(Some(halt.to_string()))
}

impl Answer {
    /// Failed: no answer, or one that asks to be tried again.
    fn outside(&self) -> Outside {
        let failed = match self {
            Answer::Failed(_) => true,
            Answer::Response { status, cut, .. } => {
                cut.is_some() || *status == 429 || *status >= 500
            }
        };
        if failed {
            Outside::Failed
        } else {
            Outside::Answered
        }
    }

    /// Records the answer on the request's span: its status, an error for
    /// a failure or a 4xx/5xx (OpenTelemetry's rule for clients), and
    /// whether the journal answered it.
    fn note(&self, span: &tracing::Span, replayed: bool) {
        if replayed {
            span.record("waft.replayed", true);
        }
        let failed = match self {
            Answer::Response { status, cut, .. } => {
                span.record("http.response.status_code", i64::from(*status));
                *status >= 400 || cut.is_some()
            }
            Answer::Failed(_) => true,
        };
        if failed {
            span.record("otel.status_code", "error");
        }
    }

    fn summary(&self) -> String {
        match self {
            Answer::Response {
                status, body, cut, ..
            } => match cut {
                None => format!("{status}, {} bytes", body.len()),
                Some(failure) => format!("{status}, {} bytes, then {failure:?}", body.len()),
            },
            Answer::Failed(failure) => format!("{failure:?}"),
        }
    }

    /// The answer as the lambda gets it.
    fn into_response(self) -> Result<Sent, Error> {
        let (status, headers, body, cut) = match self {
            Answer::Failed(failure) => return Err(failure.error()),
            Answer::Response {
                status,
                headers,
                body,
                cut,
            } => (status, headers, body, cut),
        };
        let mut response = http::Response::builder().status(status);
        for (name, value) in headers {
            response = response.header(name, value);
        }
        let response = response
            .body(full(Bytes::from(body), cut))
            .map_err(|_| Error::HttpProtocolError)?;
        let io: Box<dyn Future<Output = Result<(), Error>> + Send> = Box::new(async { Ok(()) });
        Ok((response, io))
    }
}

/// A body of `bytes`, then `cut`'s error if any.
fn full(bytes: Bytes, cut: Option<Failure>) -> WasiBody {
    Held {
        bytes: (!bytes.is_empty()).then_some(bytes),
        cut,
    }
    .boxed_unsync()
}

/// A body held whole in memory.
struct Held {
    bytes: Option<Bytes>,
    cut: Option<Failure>,
}

impl Body for Held {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        if let Some(bytes) = self.bytes.take() {
            return Poll::Ready(Some(Ok(Frame::data(bytes))));
        }
        Poll::Ready(self.cut.take().map(|failure| Err(failure.error())))
    }

    fn is_end_stream(&self) -> bool {
        self.bytes.is_none() && self.cut.is_none()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match (&self.bytes, self.cut) {
            (Some(bytes), None) => http_body::SizeHint::with_exact(bytes.len() as u64),
            (None, None) => http_body::SizeHint::with_exact(0),
            _ => http_body::SizeHint::default(),
        }
    }
}

/// `text` with each `%XX` replaced by its byte (read as UTF-8, lossily).
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied(),
            bytes.get(i + 2).copied(),
        ) {
            (b'%', Some(h), Some(l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0)) as u8);
                i += 3;
            }
            (byte, ..) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_executions_held_bodies_are_bounded_together_and_given_back() {
        let held = HeldBodies::default();
        let mut first = Holding {
            held: &held,
            bytes: 0,
        };
        assert!(first.take(MAX_REQUEST_BODY));
        {
            let mut second = Holding {
                held: &held,
                bytes: 0,
            };
            assert!(second.take(MAX_REQUEST_BODY));
            assert!(!second.take(1), "past the bound");
            assert!(!first.take(1));
        }
        assert!(first.take(MAX_REQUEST_BODY), "the second's bytes came back");
        drop(first);
        assert_eq!(held.bytes.load(std::sync::atomic::Ordering::Acquire), 0);
    }

    #[test]
    fn a_url_is_summarised_percent_decoded() {
        assert_eq!(
            percent_decoded("https://h/a%2Fb?key=s%65cr%C3%A9t&x=%zz%4"),
            "https://h/a/b?key=secrét&x=%zz%4"
        );
    }

    #[test]
    fn an_answer_reads_back_as_the_lambda_saw_it() {
        let answer = Answer::Response {
            status: 201,
            headers: vec![("x-id".into(), vec![0, 0xff])],
            body: b"made".to_vec(),
            cut: Some(Failure::ConnectionTerminated),
        };
        let bytes = encode(&answer);
        assert_eq!(postcard::from_bytes::<Answer>(&bytes).ok(), Some(answer));
    }
}
