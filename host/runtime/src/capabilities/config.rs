//! `wasi:config/store`: the lambda's variables and secrets, by name (a
//! secret wins over a variable of its name; see [`crate::Sandbox`]).
//!
//! Answered here rather than by `wasmtime-wasi-config`, whose linker
//! closure cannot refuse a call: like every capability, a stopped
//! execution reads nothing.
//!
//! Journaled (see `durable`): a variable's value as read, a secret by its
//! name only — a replay reads the secret again, so no secret's value ever
//! enters the journal.

use serde::{Deserialize, Serialize};

use crate::contract::current::wasi::config::store;
use crate::run::HostState;

const GET: &str = "wasi:config/store.get";
const GET_ALL: &str = "wasi:config/store.get-all";

/// A value as the journal keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Kept {
    Absent,
    Variable(String),
    /// A secret: read again on replay.
    Secret,
}

impl HostState {
    fn kept(&self, key: &str) -> Kept {
        match self.config.get(key) {
            None => Kept::Absent,
            Some(_) if self.secret_names.contains(key) => Kept::Secret,
            Some(value) => Kept::Variable(value.clone()),
        }
    }

    /// The value `kept` stands for now.
    fn value(&self, key: &str, kept: Kept) -> Option<String> {
        match kept {
            Kept::Absent => None,
            Kept::Variable(value) => Some(value),
            Kept::Secret => self.config.get(key).cloned(),
        }
    }
}

fn summary(kept: &Kept) -> String {
    match kept {
        Kept::Absent => "none".into(),
        Kept::Variable(value) => format!("{} bytes", value.len()),
        Kept::Secret => "a secret".into(),
    }
}

impl store::Host for HostState {
    async fn get(&mut self, key: String) -> wasmtime::Result<Result<Option<String>, store::Error>> {
        self.ensure_running()?;
        let live = self.kept(&key);
        let kept = self.journaled(
            GET,
            &key,
            || live,
            |kept| format!("get({key:?}) → {}", summary(kept)),
        )?;
        Ok(Ok(self.value(&key, kept)))
    }

    async fn get_all(&mut self) -> wasmtime::Result<Result<Vec<(String, String)>, store::Error>> {
        self.ensure_running()?;
        let live: Vec<(String, Kept)> = self
            .config
            .keys()
            .map(|key| (key.clone(), self.kept(key)))
            .collect();
        let all = self.journaled(
            GET_ALL,
            &(),
            || live,
            |all| format!("get-all → {} values", all.len()),
        )?;
        Ok(Ok(all
            .into_iter()
            .filter_map(|(key, kept)| Some((key.clone(), self.value(&key, kept)?)))
            .collect()))
    }
}
