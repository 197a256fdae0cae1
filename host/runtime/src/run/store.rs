//! One execution's store: the state its host calls work on
//! ([`HostState`]), and the store built around it with the lambda's limits
//! set: memory and tables by the limiter, host resources by the table's
//! cap, CPU by fuel, and an epoch callback that stops the guest at the
//! deadline, on a kill, or when the journal halts it. Every run, and the
//! trial instantiation of a deploy, builds one here, so each limit is set
//! in one place.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::ResourceTable;
use wasmtime::{Store, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::Sandbox;
use crate::capabilities::Taken;
use crate::durable::{Journal, MonotonicClock, Waits};
use crate::limiter::{MAX_HOST_RESOURCES, StoreLimiter};
use crate::log::{LogSink, LogSource};
use crate::outbound::Outbound;
use crate::redact::Redactor;
use crate::{KillSwitch, Runtime, TaskHost};

/// Why the host stopped an instance that was still running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    Deadline,
    Killed,
    /// The journal stopped it: a divergence, or a journal full.
    Journal,
}

/// The data of one task's store.
pub(crate) struct HostState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    pub(super) outbound: Outbound,
    /// What `wasi:config` serves: the lambda's variables and secrets.
    pub(crate) config: BTreeMap<String, String>,
    /// Which of them are secrets: the journal keeps their names only.
    pub(crate) secret_names: BTreeSet<String>,
    /// Children asked for so far, replayed ones included.
    pub(crate) children: u32,
    /// Signals taken so far, by name, replayed ones included.
    pub(crate) taken: Taken,
    pub(crate) limiter: StoreLimiter,
    pub(crate) log: LogSink,
    /// The execution's secrets, to keep out of what its host calls carry
    /// (a heartbeat's note).
    pub(crate) redactor: Arc<Redactor>,
    pub(crate) host: Arc<dyn TaskHost>,
    /// The task's journal: what this execution replays and records.
    pub(crate) journal: Journal,
    /// The epoch ticks while this store lives: its deadline and kill switch
    /// are checked at every tick.
    _ticking: crate::engine::Ticking,
    /// The monotonic clock the lambda reads, past what it replayed.
    pub(crate) monotonic: MonotonicClock,
    /// The lambda's waits on its timers, by pollable, and when it may be
    /// suspended in them (see the `durable` module's `poll`).
    pub(crate) waits: Waits,
    pub(crate) table: ResourceTable,
    kill: KillSwitch,
    deadline: Instant,
    pub(crate) stopped: Option<Stop>,
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.outbound,
        }
    }
}

impl HostState {
    /// Every host call of a stopped execution fails (and traps the guest),
    /// as does every call after the journal stopped it.
    pub(crate) fn ensure_running(&self) -> wasmtime::Result<()> {
        if let Some(reason) = self.kill.reason() {
            return Err(wasmtime::Error::msg(format!("execution stopped: {reason}")));
        }
        if let Some(halt) = self.journal.halt() {
            return Err(halt.into());
        }
        Ok(())
    }

    /// A wait of `duration` in the instance, inside a host call; cut
    /// short when the execution is stopped (the deadline ends the whole
    /// run).
    pub(crate) fn pause(&self, duration: Duration) -> impl Future<Output = ()> + Send + 'static {
        let kill = self.kill.clone();
        async move {
            tokio::select! {
                () = kill.killed() => {}
                () = tokio::time::sleep(duration) => {}
            }
        }
    }
}

/// A store for one execution, its limits set, and the fuel it was given.
pub(crate) fn new_store(
    runtime: &Runtime,
    sandbox: &Sandbox,
    deadline: Instant,
    log: LogSink,
    host: Arc<dyn TaskHost>,
    journal: Journal,
    kill: &KillSwitch,
) -> (Store<HostState>, u64) {
    let runtime = &runtime.inner;
    let limits = &sandbox.limits;
    let wasi = WasiCtxBuilder::new()
        .stdout(log.stream(LogSource::Stdout))
        .stderr(log.stream(LogSource::Stderr))
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .build();
    let mut store = Store::new(
        &runtime.engine,
        HostState {
            wasi,
            http: WasiHttpCtx::new(),
            config: sandbox
                .grants
                .env
                .iter()
                .chain(sandbox.secrets.iter().map(|(k, v)| (k, v)))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            secret_names: sandbox.secrets.iter().map(|(k, _)| k.clone()).collect(),
            children: 0,
            taken: Taken::default(),
            outbound: Outbound::new(
                sandbox.grants.clone(),
                runtime.tls.clone(),
                runtime.connections.clone(),
                kill.clone(),
                log.clone(),
                deadline,
                journal.clone(),
            ),
            table: host_resources(),
            limiter: StoreLimiter::new(limits.max_memory),
            log,
            redactor: Arc::default(),
            host,
            journal,
            monotonic: MonotonicClock::new(),
            waits: Waits::new(sandbox.suspend_after),
            kill: kill.clone(),
            deadline,
            stopped: None,
            _ticking: runtime.ticker.hold(),
        },
    );
    store.limiter(|state| &mut state.limiter);
    // The handles that name the host resources: as many as the table holds.
    store.set_max_component_handles(MAX_HOST_RESOURCES);
    let fuel = limits.fuel.unwrap_or(u64::MAX);
    if runtime.fuel {
        // Only fails when the engine does not meter fuel, checked just above.
        let _ = store.set_fuel(fuel);
    }
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(|mut context| {
        let state = context.data_mut();
        if state.kill.is_killed() {
            state.stopped = Some(Stop::Killed);
            return Ok(UpdateDeadline::Interrupt);
        }
        if Instant::now() >= state.deadline {
            state.stopped = Some(Stop::Deadline);
            return Ok(UpdateDeadline::Interrupt);
        }
        if state.journal.halt().is_some() {
            state.stopped = Some(Stop::Journal);
            return Ok(UpdateDeadline::Interrupt);
        }
        Ok(UpdateDeadline::Yield(1))
    });
    (store, fuel)
}

/// The table of a store's host resources, capped.
fn host_resources() -> ResourceTable {
    let mut table = ResourceTable::new();
    table.set_max_capacity(MAX_HOST_RESOURCES);
    table
}
