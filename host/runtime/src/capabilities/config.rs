//! `wasi:config/store`: the lambda's variables and secrets, by name (a
//! secret wins over a variable of its name; see [`crate::Sandbox`]).
//!
//! Answered here rather than by `wasmtime-wasi-config`, whose linker
//! closure cannot refuse a call: like every capability, a stopped
//! execution reads nothing.

use crate::contract::current::wasi::config::store;
use crate::run::HostState;

impl store::Host for HostState {
    async fn get(&mut self, key: String) -> wasmtime::Result<Result<Option<String>, store::Error>> {
        self.ensure_running()?;
        Ok(Ok(self.config.get(&key).cloned()))
    }

    async fn get_all(&mut self) -> wasmtime::Result<Result<Vec<(String, String)>, store::Error>> {
        self.ensure_running()?;
        Ok(Ok(self
            .config
            .iter()
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect()))
    }
}
