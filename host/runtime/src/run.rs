//! Running one task: a fresh store and instance under the lambda's limits.
//!
//! Each limit is enforced by the cheapest mechanism that is always on:
//! memory, tables and host resources by the store's limiter (see the
//! `limiter` module) and its `ResourceTable`'s cap, CPU by fuel (when the
//! lambda has a fuel limit), wall-clock time and the kill switch by epoch
//! interruption. An
//! epoch callback makes a running guest yield at every tick, so the call
//! future is polled often enough for a deadline or a kill to stop a guest
//! that is waiting in a host call as well as one spinning in WebAssembly.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::time::sleep_until;
use tracing::Instrument as _;
use waft_core::model::JournalEntry;
use waft_core::{Grants, Limits, OnDivergence};
use wasmtime::component::ResourceTable;
use wasmtime::{Store, Trap, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::capabilities::Taken;
use crate::contract::current::wit::types as wit_types;
use crate::durable::{Halt, Journal, MonotonicClock, Waits};
use crate::lambda::error_chain;
use crate::limiter::{MAX_HOST_RESOURCES, StoreLimiter};
use crate::log::{LogSink, LogSource};
use crate::outbound::Outbound;
use crate::redact::Redactor;
use crate::{Execution, KillSwitch, Limit, Outcome, PreparedLambda, Runtime, TaskHost};

/// The task handed to a lambda.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskInput {
    pub id: String,
    pub lambda: String,
    pub collection: String,
    pub priority: u8,
    /// 1 on the first run.
    pub attempt: u32,
    pub scheduled_at: SystemTime,
    pub payload: Vec<u8>,
    /// The task's journal: its earlier executions' host calls, answered
    /// from here before the lambda runs live.
    pub journal: Vec<JournalEntry>,
}

/// What one execution runs under: its limits, and what its lambda is
/// granted (nothing by default).
#[derive(Debug, Clone, Default)]
pub struct Sandbox {
    pub limits: Limits,
    pub grants: Arc<Grants>,
    /// The lambda's secrets in clear, by name: served through `wasi:config`
    /// beside its variables (a secret wins over a variable of its name),
    /// and redacted from its log, errors and output.
    pub secrets: Arc<Vec<(String, String)>>,
    /// What an attempt does when the lambda's calls stop matching the
    /// journal.
    pub on_divergence: OnDivergence,
    /// A lambda blocked on nothing but its own timers, the earliest further
    /// away than this, is suspended ([`Outcome::Suspended`]); `None`: every
    /// wait is waited out in the instance (no store to resume from).
    pub suspend_after: Option<Duration>,
    /// Stop the execution at the first call its journal does not answer
    /// (past its end, or a call that never answered) instead of making it
    /// live: [`Outcome::Killed`], with where in
    /// [`Execution::journal_end`]. For replaying a task's journal locally,
    /// as it happened and no further.
    pub replay_only: bool,
}

impl From<Limits> for Sandbox {
    fn from(limits: Limits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }
}

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
    outbound: Outbound,
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

impl PreparedLambda {
    /// [`run`](Self::run), on the runtime's guest threads rather than the
    /// caller's: what an executor does, so that its own work never waits
    /// behind a guest (see the `guests` module). Dropping the future stops
    /// the instance within an epoch tick.
    pub async fn run_on_guest_threads(
        &self,
        task: TaskInput,
        sandbox: &Sandbox,
        host: Arc<dyn TaskHost>,
        kill: &KillSwitch,
    ) -> Execution {
        let lambda = self.clone();
        let sandbox = sandbox.clone();
        let guest_kill = kill.clone();
        let spawned = self.runtime.inner.guests.spawn(
            async move { lambda.run(task, &sandbox, host, &guest_kill).await }
                // The execution's span follows it onto the guest threads:
                // its outbound requests' spans are its children.
                .in_current_span(),
        );
        match spawned {
            Ok(running) => running.join().await.unwrap_or_else(|error| {
                Execution::host_error(format!("the execution's thread failed: {error}"))
            }),
            Err(message) => Execution::host_error(message),
        }
    }

    /// Runs `task` to an outcome in a fresh instance.
    ///
    /// `sandbox` holds its limits and grants; `host` answers the lambda's
    /// heartbeats and child-task requests; `kill` stops the execution from
    /// elsewhere. Never panics on anything the guest does: every failure is
    /// an [`Outcome`].
    pub async fn run(
        &self,
        mut task: TaskInput,
        sandbox: &Sandbox,
        host: Arc<dyn TaskHost>,
        kill: &KillSwitch,
    ) -> Execution {
        let started = Instant::now();
        let redactor = Arc::new(Redactor::new(
            sandbox.secrets.iter().map(|(_, value)| value.as_str()),
        ));
        let recorded = std::mem::take(&mut task.journal);
        let journal = Journal::new(host.clone(), task.attempt, recorded, redactor.clone());
        if sandbox.replay_only {
            journal.stop_at_end();
        }
        let deadline = started + sandbox.limits.timeout;
        let first = self
            .run_once(task.clone(), sandbox, kill, &journal, deadline, None)
            .await;
        let Outcome::Diverged { message } = &first.outcome else {
            return first;
        };
        if sandbox.on_divergence == OnDivergence::Fail {
            return first;
        }
        // Deployed `--on-divergence restart`: the journal goes, and the
        // task starts afresh in a new instance, with what is left of its
        // time and fuel.
        let note = format!("the journal was discarded, the lambda starting afresh: {message}");
        let mut rest = sandbox.clone();
        if let (Some(fuel), Some(burnt)) = (rest.limits.fuel, first.fuel_consumed) {
            rest.limits.fuel = Some(fuel.saturating_sub(burnt));
        }
        // The platform learns of it before the fresh run schedules any
        // child: that run's children are a new generation's.
        if let Err(lost) = host.discard_journal().await {
            kill.kill(lost.reason);
        }
        let fresh = journal.discarding();
        let mut again = self
            .run_once(task, &rest, kill, &fresh, deadline, Some(note))
            .await;
        again.duration = started.elapsed();
        again
    }

    /// One instance's run of `task` until `deadline`, its calls journaled
    /// in `journal`; `note` goes first in its log.
    async fn run_once(
        &self,
        task: TaskInput,
        sandbox: &Sandbox,
        kill: &KillSwitch,
        journal: &Journal,
        deadline: Instant,
        note: Option<String>,
    ) -> Execution {
        let limits = &sandbox.limits;
        let started = Instant::now();
        let redactor = journal.redactor();
        let log = LogSink::new(
            limits.max_log.bytes(),
            started,
            kill.clone(),
            redactor.clone(),
        )
        .marking_replay(journal.replaying_flag());
        if let Some(note) = note {
            log.record(LogSource::Waft, note, Vec::new());
        }
        let (mut store, fuel) = new_store(
            &self.runtime,
            sandbox,
            deadline,
            log.clone(),
            journal.host(),
            journal.clone(),
            kill,
        );
        store.data_mut().redactor = redactor.clone();
        let runtime = &self.runtime.inner;

        let wit_task = wit_types::Task {
            id: task.id,
            lambda: task.lambda,
            collection: task.collection,
            priority: task.priority,
            attempt: task.attempt,
            scheduled_at: unix_millis(task.scheduled_at),
            payload: task.payload,
        };

        let result = {
            let relink = self.relink.then_some(&runtime.linker);
            let call = self.handler.handle(&mut store, wit_task, relink);
            tokio::select! {
                biased;
                () = kill.killed() => Err(Stop::Killed),
                () = sleep_until(deadline.into()) => Err(Stop::Deadline),
                result = call => Ok(result),
            }
        };

        let state = store.data();
        let fuel_consumed = if runtime.fuel {
            store.get_fuel().ok().map(|left| fuel - left)
        } else {
            None
        };
        let outcome = match (result, journal.halt()) {
            (Err(Stop::Killed), _) => stopped(Stop::Killed, kill, limits),
            (_, Some(halt)) if !kill.is_killed() => halted(halt),
            (Err(stop), _) => stopped(stop, kill, limits),
            (Ok(Ok(outcome)), _) => answered(outcome, limits),
            (Ok(Err(_)), _) if let Some((until, wait)) = state.waits.suspended() => {
                Outcome::Suspended { until, wait }
            }
            (Ok(Err(error)), _) => trapped(&error, state, kill, limits),
        };
        let outcome = if redactor.is_empty() {
            outcome
        } else {
            redact(outcome, &redactor)
        };
        let peak_memory = state.limiter.peak() as u64;
        let outbound = state.outbound.records();
        // Dropping the store aborts whatever requests are still in flight.
        drop(store);
        let ended_at = SystemTime::now();
        // A lambda that gave up asks for its last outside call again.
        let cut = matches!(outcome, Outcome::Retriable { .. } | Outcome::Fatal { .. });
        let journal_end = match journal.halt() {
            Some(Halt::Ended { seq, call }) => Some((seq, call)),
            _ => None,
        };
        Execution {
            outcome,
            log: log.finish(),
            duration: started.elapsed(),
            fuel_consumed,
            peak_memory,
            ended_at,
            outbound,
            journal: journal.finish(cut),
            replayed: journal.replayed(),
            journal_end,
        }
    }
}

/// The outcome of an execution its journal stopped.
fn halted(halt: Halt) -> Outcome {
    match halt {
        Halt::Diverged(message) => Outcome::Diverged { message },
        halt @ Halt::Ended { .. } => Outcome::Killed {
            reason: halt.to_string(),
        },
        Halt::Full(detail) => Outcome::LimitExceeded {
            limit: Limit::Journal,
            detail,
        },
    }
}

/// The outcome without the secrets' values.
fn redact(outcome: Outcome, redactor: &Redactor) -> Outcome {
    match outcome {
        Outcome::Success { output } => Outcome::Success {
            output: output.map(|bytes| redactor.bytes(bytes)),
        },
        Outcome::Retriable {
            message,
            retry_after,
        } => Outcome::Retriable {
            message: redactor.text(message),
            retry_after,
        },
        Outcome::Fatal { message } => Outcome::Fatal {
            message: redactor.text(message),
        },
        Outcome::Trapped { message } => Outcome::Trapped {
            message: redactor.text(message),
        },
        other @ (Outcome::LimitExceeded { .. }
        | Outcome::Killed { .. }
        | Outcome::HostError { .. }
        | Outcome::Diverged { .. }
        | Outcome::Suspended { .. }) => other,
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

fn stopped(stop: Stop, kill: &KillSwitch, limits: &Limits) -> Outcome {
    match stop {
        Stop::Killed => Outcome::Killed {
            reason: kill.reason().unwrap_or("killed").to_owned(),
        },
        Stop::Deadline => Outcome::LimitExceeded {
            limit: Limit::Deadline,
            detail: format!("still running after the timeout of {:?}", limits.timeout),
        },
        // Its halt is the outcome; this is what is left when it cannot be read.
        Stop::Journal => Outcome::Trapped {
            message: "stopped by its journal".into(),
        },
    }
}

/// The lambda's own answer, checked against the output limit.
fn answered(outcome: wit_types::Outcome, limits: &Limits) -> Outcome {
    let max = limits.max_output.as_usize();
    match outcome {
        wit_types::Outcome::Success(output) => match output {
            Some(bytes) if bytes.len() > max => Outcome::LimitExceeded {
                limit: Limit::Output,
                detail: format!(
                    "output of {} bytes is over the limit of {}",
                    bytes.len(),
                    limits.max_output
                ),
            },
            output => Outcome::Success { output },
        },
        wit_types::Outcome::Retriable(failure) => Outcome::Retriable {
            message: truncate(failure.message, max),
            retry_after: failure.retry_after_ms.map(Duration::from_millis),
        },
        wit_types::Outcome::Fatal(message) => Outcome::Fatal {
            message: truncate(message, max),
        },
    }
}

/// What an instance that returned an error (a trap, or a failed
/// instantiation) ran into. The host's own records come first: a trap's code
/// says how the guest died, not why.
fn trapped(
    error: &wasmtime::Error,
    state: &HostState,
    kill: &KillSwitch,
    limits: &Limits,
) -> Outcome {
    if let Some(stop) = state.stopped {
        return stopped(stop, kill, limits);
    }
    if kill.is_killed() {
        return stopped(Stop::Killed, kill, limits);
    }
    if let Some(detail) = state.limiter.breach(error) {
        return Outcome::LimitExceeded {
            limit: Limit::Memory,
            detail,
        };
    }
    match error.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => Outcome::LimitExceeded {
            limit: Limit::Fuel,
            detail: format!(
                "burnt all {} units of fuel",
                limits
                    .fuel
                    .map_or("available".to_owned(), |f| f.to_string())
            ),
        },
        // The trap itself says what happened; the wasm backtrace that
        // wraps it names only anonymous functions of a stripped binary.
        Some(trap) => Outcome::Trapped {
            message: trap.to_string(),
        },
        // Not a trap: the host failed to set the instance up.
        None if is_allocation_failure(error) => Outcome::HostError {
            message: error_chain(error),
        },
        None => Outcome::Trapped {
            message: error_chain(error),
        },
    }
}

/// Every pooling slot is taken: the host is full, the task is not at fault.
fn is_allocation_failure(error: &wasmtime::Error) -> bool {
    error
        .downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
        .is_some()
}

fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

fn unix_millis(at: SystemTime) -> i64 {
    match at.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_millis()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_millis()).unwrap_or(i64::MAX),
    }
}
