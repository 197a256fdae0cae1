//! The task's log: records from the `log` import, stdout and stderr, bounded.
//!
//! A lambda cannot fill the host's memory by logging: past the lambda's
//! `max_log` budget, records are dropped and counted, and the task's log says
//! so. Logging too much is not a failure of the task.

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError, StreamResult};

use crate::KillSwitch;
use crate::redact::Redactor;

/// Severity of a record written through the `log` import.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

impl Level {
    /// The level's name in lower case.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Trace => "trace",
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        }
    }
}

/// Where a record came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogSource {
    /// The `log` import, at a level.
    Lambda(Level),
    /// A line the lambda wrote to stdout.
    Stdout,
    /// A line the lambda wrote to stderr (panic messages land here).
    Stderr,
    /// A note of the host's about the execution, such as a request it
    /// refused for want of a grant.
    Waft,
}

impl std::fmt::Display for LogSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LogSource::Lambda(level) => f.write_str(level.as_str()),
            LogSource::Stdout => f.write_str("stdout"),
            LogSource::Stderr => f.write_str("stderr"),
            LogSource::Waft => f.write_str("waft"),
        }
    }
}

/// One record of a task's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    /// Time since the execution started.
    pub at: Duration,
    pub source: LogSource,
    pub message: String,
    /// Structured fields given to the `log` import.
    pub fields: Vec<(String, String)>,
}

/// Everything an execution logged, within its budget.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskLog {
    pub records: Vec<LogRecord>,
    /// Records dropped because the budget was spent.
    pub dropped_records: u64,
    /// Bytes of those records.
    pub dropped_bytes: u64,
}

impl TaskLog {
    /// Whether records were dropped for want of budget.
    pub fn truncated(&self) -> bool {
        self.dropped_records > 0
    }
}

/// Longest partial line kept from stdout/stderr before it is cut into a record.
const MAX_PARTIAL_LINE: usize = 8 * 1024;

/// The shared, bounded log of one execution. Cheap to clone.
#[derive(Clone)]
pub(crate) struct LogSink {
    state: Arc<Mutex<SinkState>>,
    kill: KillSwitch,
}

struct SinkState {
    started: Instant,
    redactor: Arc<Redactor>,
    budget: u64,
    log: TaskLog,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

impl LogSink {
    pub(crate) fn new(
        budget: u64,
        started: Instant,
        kill: KillSwitch,
        redactor: Arc<Redactor>,
    ) -> Self {
        Self {
            state: Arc::new(Mutex::new(SinkState {
                started,
                redactor,
                budget,
                log: TaskLog::default(),
                stdout: Vec::new(),
                stderr: Vec::new(),
            })),
            kill,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SinkState> {
        // A panic while holding the lock leaves only a partial log behind.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn record(&self, source: LogSource, message: String, fields: Vec<(String, String)>) {
        self.lock().push(source, message, fields);
    }

    fn write_stream(&self, source: LogSource, bytes: &[u8]) {
        let mut state = self.lock();
        let state = &mut *state;
        // Only the two streams come here; records go straight to `push`.
        let buffer = match source {
            LogSource::Stderr => &mut state.stderr,
            LogSource::Stdout | LogSource::Lambda(_) | LogSource::Waft => &mut state.stdout,
        };
        buffer.extend_from_slice(bytes);
        let mut lines = Vec::new();
        while let Some(end) = buffer.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            lines.push(line[..line.len() - 1].to_vec());
        }
        if buffer.len() > MAX_PARTIAL_LINE {
            lines.push(std::mem::take(buffer));
        }
        for line in lines {
            let text = String::from_utf8_lossy(&line).into_owned();
            state.push(source, text, Vec::new());
        }
    }

    /// Ends the log: flushes partial lines and returns what was kept.
    pub(crate) fn finish(&self) -> TaskLog {
        let mut state = self.lock();
        for source in [LogSource::Stdout, LogSource::Stderr] {
            let rest = if source == LogSource::Stderr {
                std::mem::take(&mut state.stderr)
            } else {
                std::mem::take(&mut state.stdout)
            };
            if !rest.is_empty() {
                let text = String::from_utf8_lossy(&rest).into_owned();
                state.push(source, text, Vec::new());
            }
        }
        std::mem::take(&mut state.log)
    }

    /// A WASI stdout or stderr that writes into this log.
    pub(crate) fn stream(&self, source: LogSource) -> CapturedStream {
        CapturedStream {
            sink: self.clone(),
            source,
        }
    }
}

impl SinkState {
    fn push(&mut self, source: LogSource, message: String, fields: Vec<(String, String)>) {
        let (message, fields) = if self.redactor.is_empty() {
            (message, fields)
        } else {
            let redactor = &self.redactor;
            (
                redactor.text(message),
                fields
                    .into_iter()
                    .map(|(k, v)| (redactor.text(k), redactor.text(v)))
                    .collect(),
            )
        };
        let size =
            (message.len() + fields.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()) as u64;
        if size > self.budget {
            self.log.dropped_records += 1;
            self.log.dropped_bytes += size;
            return;
        }
        self.budget -= size;
        self.log.records.push(LogRecord {
            at: self.started.elapsed(),
            source,
            message,
            fields,
        });
    }
}

/// stdout or stderr of an instance, captured into its task's log.
#[derive(Clone)]
pub(crate) struct CapturedStream {
    sink: LogSink,
    source: LogSource,
}

impl CapturedStream {
    fn write_checked(&self, bytes: &[u8]) -> Result<(), String> {
        if let Some(reason) = self.sink.kill.reason() {
            return Err(format!("execution stopped: {reason}"));
        }
        self.sink.write_stream(self.source, bytes);
        Ok(())
    }
}

impl IsTerminal for CapturedStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CapturedStream {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for CapturedStream {
    async fn ready(&mut self) {}
}

impl OutputStream for CapturedStream {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.write_checked(&bytes)
            .map_err(|why| StreamError::Trap(wasmtime::Error::msg(why)))
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 * 1024)
    }
}

impl tokio::io::AsyncWrite for CapturedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Poll::Ready(
            self.write_checked(buf)
                .map(|()| buf.len())
                .map_err(std::io::Error::other),
        )
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sink(budget: u64) -> LogSink {
        LogSink::new(budget, Instant::now(), KillSwitch::new(), Arc::default())
    }

    #[test]
    fn stream_writes_become_one_record_per_line() {
        let log = sink(1024);
        log.write_stream(LogSource::Stdout, b"one\ntw");
        log.write_stream(LogSource::Stdout, b"o\nthree");
        log.write_stream(LogSource::Stderr, b"oops\n");
        let log = log.finish();
        let lines: Vec<(LogSource, &str)> = log
            .records
            .iter()
            .map(|r| (r.source, r.message.as_str()))
            .collect();
        assert_eq!(
            lines,
            [
                (LogSource::Stdout, "one"),
                (LogSource::Stdout, "two"),
                (LogSource::Stderr, "oops"),
                (LogSource::Stdout, "three"),
            ]
        );
    }

    #[test]
    fn records_past_the_budget_are_dropped_and_counted() {
        let log = sink(10);
        log.record(LogSource::Lambda(Level::Info), "12345".into(), vec![]);
        log.record(LogSource::Lambda(Level::Info), "123456".into(), vec![]);
        log.record(
            LogSource::Lambda(Level::Info),
            "1234".into(),
            vec![("k".into(), "x".into())],
        );
        let log = log.finish();
        assert_eq!(log.records.len(), 1);
        assert_eq!((log.dropped_records, log.dropped_bytes), (2, 12));
        assert!(log.truncated());
    }

    #[test]
    fn a_killed_execution_cannot_write() {
        let kill = KillSwitch::new();
        let log = LogSink::new(100, Instant::now(), kill.clone(), Arc::default());
        let stream = log.stream(LogSource::Stdout);
        assert!(stream.write_checked(b"before\n").is_ok());
        kill.kill("lease lost");
        assert!(stream.write_checked(b"after\n").is_err());
        assert_eq!(log.finish().records.len(), 1);
    }
}
