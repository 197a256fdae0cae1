//! `waft:lambda/log`: a lambda's records, into its task's bounded log.

use crate::contract::v0_2::wit::log;
use crate::log::{Level, LogSource};
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
