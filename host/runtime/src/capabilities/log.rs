//! `waft:lambda/log` and `wasi:cli` stdout and stderr: a lambda's records
//! and lines, into its task's bounded log ([`crate::log`]).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError, StreamResult};

use crate::contract::current::wit::log;
use crate::log::{Level, LogSink, LogSource};
use crate::run::HostState;

impl log::Host for HostState {
    fn log(
        &mut self,
        level: log::Level,
        message: String,
        fields: Vec<(String, String)>,
    ) -> wasmtime::Result<()> {
        self.ensure_running()?;
        let level = match level {
            log::Level::Trace => Level::Trace,
            log::Level::Debug => Level::Debug,
            log::Level::Info => Level::Info,
            log::Level::Warn => Level::Warn,
            log::Level::Error => Level::Error,
        };
        self.log.record(LogSource::Lambda(level), message, fields);
        Ok(())
    }
}

impl LogSink {
    /// A WASI stdout or stderr that writes into this log.
    pub(crate) fn stream(&self, source: LogSource) -> CapturedStream {
        CapturedStream {
            sink: self.clone(),
            source,
        }
    }
}

/// stdout or stderr of an instance, captured into its task's log.
#[derive(Clone)]
pub(crate) struct CapturedStream {
    sink: LogSink,
    source: LogSource,
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
        self.sink
            .write_stream(self.source, &bytes)
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
            self.sink
                .write_stream(self.source, buf)
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
