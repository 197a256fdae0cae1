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
//!
//! This file holds what a run is given (the task, its sandbox) and the run
//! itself: the instance called, and a restart when a lambda deployed to
//! restart diverges from its journal. The store every run builds, with the
//! state host calls work on and the epoch callback that stops it, is
//! `run/store.rs`; what the end of a run means as an [`Outcome`],
//! `run/verdict.rs`.

mod store;
mod verdict;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::time::sleep_until;
use tracing::Instrument as _;
use waft_core::model::JournalEntry;
use waft_core::{Grants, Limits, OnDivergence};

use crate::contract::current::wit::types as wit_types;
use crate::durable::{Halt, Journal};
use crate::log::{LogSink, LogSource};
use crate::redact::Redactor;
use crate::{Execution, KillSwitch, Outcome, PreparedLambda, TaskHost};
pub(crate) use store::{HostState, Stop, new_store};
use verdict::{answered, halted, redact, stopped, trapped};

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
        let (journal_end, divergence) = match journal.halt() {
            Some(Halt::Ended { seq, call }) => (Some((seq, call)), None),
            Some(Halt::Diverged(divergence)) => (None, Some(divergence)),
            _ => (None, None),
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
            divergence,
        }
    }
}

fn unix_millis(at: SystemTime) -> i64 {
    match at.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_millis()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_millis()).unwrap_or(i64::MAX),
    }
}
