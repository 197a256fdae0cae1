//! The pipeline end to end, in both modes.
//!
//! Every scenario (`pipeline/scenarios/`) is a test of its own in each
//! mode: `dev::chaining` runs against `waft dev` (one process, SQLite,
//! in-process queues), `distributed::chaining` against the distributed mode
//! (a `waft serve` process per role, two consumers, Postgres, an
//! SQS-compatible server, auth and TLS on). Run one with
//! `cargo test --test pipeline -- dev::chaining`, or every mode's with
//! `-- chaining`.
//!
//! The scenarios of one mode share its installation: started when its first
//! scenario runs, used by one scenario at a time, and stopped when the run
//! ends, so a failure is reported and the rest still run, and no process
//! outlives the test binary. The two modes run side by side, each its
//! scenarios in turn, from the start: every trial has a thread and waits for
//! its installation's turn. Checks that need processes of their own
//! (`pipeline/standalone.rs`, `pipeline/idle.rs`) start them, in the
//! distributed installation's turns (two installations busy at a time, not
//! more): the `waft dev` lane has the Python and JavaScript samples to
//! compile first, and so both lanes end about together on a cold compile
//! cache. A trial's time, in the log, counts from its turn; a language
//! scenario that waited for the other mode's compile says how long.
//!
//! A mode this machine cannot run (the distributed mode without PostgreSQL
//! or the SQS-compatible server) has its scenarios reported as ignored,
//! each with the reason, never as passed; under `CI=true` they fail.
//!
//! This test has its own harness (`libtest-mimic`): the standard one gives
//! tests no state to share that is ever dropped.

mod support;

#[path = "pipeline/checks.rs"]
mod checks;
#[path = "pipeline/deleted_children.rs"]
mod deleted_children;
#[path = "pipeline/deploys.rs"]
mod deploys;
#[path = "pipeline/generations.rs"]
mod generations;
#[path = "pipeline/idle.rs"]
mod idle;
#[path = "pipeline/names.rs"]
mod names;
#[path = "pipeline/retention.rs"]
mod retention;
#[path = "pipeline/scenarios/mod.rs"]
mod scenarios;
#[path = "pipeline/standalone.rs"]
mod standalone;
#[path = "pipeline/traces.rs"]
mod traces;
#[path = "pipeline/waits.rs"]
mod waits;

use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;

use libtest_mimic::{Arguments, Completion, Failed, Trial};
use tokio::runtime::Runtime;
use tokio::sync::Mutex;

use support::Cluster;

type Scenario = for<'a> fn(&'a Cluster) -> Pin<Box<dyn Future<Output = ()> + 'a>>;

/// Each scenario by name, as a [`Scenario`].
macro_rules! scenarios {
    ($($name:ident),* $(,)?) => {{
        $(
            fn $name(cluster: &Cluster) -> Pin<Box<dyn Future<Output = ()> + '_>> {
                Box::pin(scenarios::$name(cluster))
            }
        )*
        [$((stringify!($name), $name as Scenario)),*]
    }};
}

fn main() -> ExitCode {
    let mut args = Arguments::from_args();
    let runtime = Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime"),
    );
    let dev = Arc::new(Installation::new(Mode::Dev));
    let distributed = Arc::new(Installation::new(Mode::Distributed));

    let mut trials = Vec::new();
    // The Python and JavaScript lambdas first in `waft dev` and last in
    // the distributed mode, so that the distributed Frontend finds their
    // large components compiled in the shared cache (tests/support).
    let languages = scenarios![python, javascript];
    for (name, scenario) in languages {
        trials.push(dev.trial(&runtime, name, scenario));
    }
    // Each mode takes its scenarios in this order (its turns are first
    // come, first served).
    for (name, scenario) in scenarios![
        success,
        retry_then_success,
        fatal,
        dead_letter,
        over_its_limit,
        chaining,
        cancel,
        bad_input_stores_nothing,
        new_versions_apply_without_restart,
        priorities,
        gates,
        periodic,
        quotas,
        key_concurrency,
        key_rate,
        key_fairness,
        debounce,
        metrics,
        auth,
        outbound,
        secrets,
        first_contract,
        durable,
        replay_locally,
        durable_sleep,
        suspended_tasks_hold_no_slot,
        signals,
        deploy_check,
        fan_in,
        deleted_children,
        fresh_starts_schedule_new_children,
        a_restart_on_divergence_schedules_new_children,
        retention,
    ] {
        for installation in [&dev, &distributed] {
            trials.push(installation.trial(&runtime, name, scenario));
        }
    }
    fn name_deployed_again(cluster: &Cluster) -> Pin<Box<dyn Future<Output = ()> + '_>> {
        Box::pin(names::a_name_deployed_again_is_a_new_lambda(cluster))
    }
    for installation in [&dev, &distributed] {
        trials.push(installation.trial(
            &runtime,
            "a_name_deployed_again_is_a_new_lambda",
            name_deployed_again,
        ));
    }
    for (name, scenario) in languages {
        trials.push(distributed.trial(&runtime, name, scenario));
    }
    let [(name, scenario)] = scenarios![wrong_role_and_health];
    trials.push(distributed.trial(&runtime, name, scenario));
    let [(name, scenario)] = scenarios![page_and_grpc_web];
    trials.push(dev.trial(&runtime, name, scenario));
    trials.push(distributed.beside(
        "serve_refuses_an_incomplete_or_unsafe_configuration_before_binding",
        || {
            standalone::serve_refuses_an_incomplete_or_unsafe_configuration_before_binding();
            Ok(Completion::Completed)
        },
    ));
    trials.push(
        distributed.beside("tls_when_a_certificate_is_configured", || {
            standalone::tls_when_a_certificate_is_configured();
            Ok(Completion::Completed)
        }),
    );
    let on = runtime.clone();
    trials.push(distributed.beside(
        "missed_occurrences_are_caught_up_or_skipped_after_downtime",
        move || {
            on.block_on(standalone::missed_occurrences_are_caught_up_or_skipped_after_downtime());
            Ok(Completion::Completed)
        },
    ));

    let on = runtime.clone();
    trials.push(
        distributed.beside("a_restarted_dev_recovers_its_tasks_at_once", move || {
            on.block_on(standalone::a_restarted_dev_recovers_its_tasks_at_once());
            Ok(Completion::Completed)
        }),
    );
    let on = runtime.clone();
    trials.push(
        distributed.beside("an_idle_controller_leaves_the_queues_alone", move || {
            distributed_ran(on.block_on(idle::an_idle_controller_leaves_the_queues_alone()))
        }),
    );
    let on = runtime.clone();
    trials.push(
        distributed.beside("every_deploy_is_seen_at_once_in_dev", move || {
            on.block_on(deploys::every_deploy_is_seen_at_once_in_dev());
            Ok(Completion::Completed)
        }),
    );
    let on = runtime.clone();
    trials.push(
        distributed.beside("every_deploy_is_seen_at_once_across_processes", move || {
            distributed_ran(on.block_on(deploys::every_deploy_is_seen_at_once_across_processes()))
        }),
    );
    let on = runtime.clone();
    trials.push(
        distributed.beside("a_tasks_path_is_one_trace_in_dev", move || {
            on.block_on(traces::a_tasks_path_is_one_trace_in_dev());
            Ok(Completion::Completed)
        }),
    );
    let on = runtime.clone();
    trials.push(
        distributed.beside("a_tasks_path_is_one_trace_across_processes", move || {
            distributed_ran(on.block_on(traces::a_tasks_path_is_one_trace_across_processes()))
        }),
    );
    let on = runtime.clone();
    trials.push(distributed.beside(
        "a_small_executor_holds_a_thousand_sleepers_and_runs_new_tasks_at_once",
        move || {
            on.block_on(
                waits::a_small_executor_holds_a_thousand_sleepers_and_runs_new_tasks_at_once(),
            );
            Ok(Completion::Completed)
        },
    ));
    let on = runtime.clone();
    trials.push(distributed.beside(
        "a_kill_while_tasks_are_suspended_changes_nothing",
        move || {
            on.block_on(waits::a_kill_while_tasks_are_suspended_changes_nothing());
            Ok(Completion::Completed)
        },
    ));

    // A thread a trial: each waits for its installation's turn, so both
    // installations are busy from the start, each with its trials in order.
    args.test_threads.get_or_insert(trials.len());
    let conclusion = libtest_mimic::run(&args, trials);
    // Stops every process the installations started.
    runtime.block_on(async {
        dev.stop().await;
        distributed.stop().await;
    });
    conclusion.exit_code()
}

/// Says how long a trial took once it had its turn, when dropped, so that
/// a run's log shows where its time went.
struct Timed {
    name: String,
    started: std::time::Instant,
}

impl Timed {
    fn start(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            started: std::time::Instant::now(),
        }
    }
}

impl Drop for Timed {
    fn drop(&mut self) {
        eprintln!(
            "{}: {:.1} s",
            self.name,
            self.started.elapsed().as_secs_f64()
        );
    }
}

/// The end of a test that needs the distributed mode and says whether it
/// could run: ignored on a machine without it, failed under `CI=true`.
fn distributed_ran(ran: bool) -> Result<Completion, libtest_mimic::Failed> {
    match ran {
        true => Ok(Completion::Completed),
        false if waft_testing::in_ci() => {
            Err("the distributed mode is required under CI=true".into())
        }
        false => Ok(Completion::ignored_with(
            "the distributed mode cannot run here; see \"skipping:\" above",
        )),
    }
}

#[derive(Clone, Copy, Debug)]
enum Mode {
    Dev,
    Distributed,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Dev => "dev",
            Mode::Distributed => "distributed",
        }
    }

    /// A running installation, or why this machine cannot run the mode
    /// (outside CI only: under `CI=true` `waft-testing` fails instead).
    async fn start(self) -> Result<Cluster, String> {
        match self {
            Mode::Dev => Ok(Cluster::dev().await),
            Mode::Distributed => {
                // Asked here first to tell which one is missing; each prints
                // its own details, after "skipping:".
                let missing = if waft_testing::postgres().is_none() {
                    "PostgreSQL"
                } else if waft_testing::sqs().is_none() {
                    "the SQS-compatible server (fauxqs)"
                } else {
                    return Cluster::distributed(1)
                        .await
                        .ok_or_else(|| "a service it needs is unavailable here".into());
                };
                Err(format!(
                    "{missing} is unavailable here; see \"skipping:\" above"
                ))
            }
        }
    }
}

/// Prints what the installation's processes logged during a scenario
/// that panics: the installation outlives it, and its processes' logs
/// are where a failure under load is explained.
struct LogsOnPanic<'a> {
    cluster: &'a Cluster,
    marks: support::LogMarks,
}

impl Drop for LogsOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "what the processes logged during the scenario:\n{}",
                self.cluster.logs_since(&self.marks)
            );
        }
    }
}

/// One mode's installation, shared by its scenarios one at a time.
struct Installation {
    mode: Mode,
    state: Mutex<State>,
}

enum State {
    NotStarted,
    Running(Box<Cluster>),
    /// The mode cannot run here, and why: its scenarios are ignored (and
    /// fail under `CI=true`).
    Unavailable(String),
    /// Starting it failed; the first scenario reported why.
    Broken,
    Stopped,
}

impl Installation {
    fn new(mode: Mode) -> Self {
        Self {
            mode,
            state: Mutex::new(State::NotStarted),
        }
    }

    fn trial(self: &Arc<Self>, runtime: &Arc<Runtime>, name: &str, scenario: Scenario) -> Trial {
        let (installation, runtime) = (self.clone(), runtime.clone());
        let name = format!("{}::{name}", self.mode.name());
        Trial::ignorable_test(name.clone(), move || {
            runtime.block_on(installation.run(&name, scenario))
        })
    }

    async fn run(&self, name: &str, scenario: Scenario) -> Result<Completion, Failed> {
        let mut state = self.state.lock().await;
        let _timed = Timed::start(name);
        if let State::NotStarted = *state {
            // Marked broken until it is up: a panic while starting leaves it so.
            *state = State::Broken;
            *state = match self.mode.start().await {
                Ok(cluster) => {
                    scenarios::setup(&cluster).await;
                    State::Running(Box::new(cluster))
                }
                Err(why) => State::Unavailable(why),
            };
        }
        match &*state {
            State::Running(cluster) => {
                let _logs = LogsOnPanic {
                    cluster,
                    marks: cluster.log_marks(),
                };
                scenario(cluster).await;
                Ok(Completion::Completed)
            }
            // Not a pass: nothing ran.
            State::Unavailable(why) if waft_testing::in_ci() => Err(format!(
                "the {} mode is required under CI=true: {why}",
                self.mode.name()
            )
            .into()),
            State::Unavailable(why) => Ok(Completion::ignored_with(format!(
                "the {} mode cannot run: {why}",
                self.mode.name()
            ))),
            State::Broken => Err(format!(
                "the {} installation did not start: see the first of its scenarios to fail",
                self.mode.name()
            )
            .into()),
            State::NotStarted | State::Stopped => unreachable!("started above, stopped after"),
        }
    }

    /// A trial that needs no installation but takes this one's turn: it
    /// starts processes of its own, and two installations at work at once
    /// are as much as a small machine takes.
    fn beside(
        self: &Arc<Self>,
        name: &str,
        run: impl FnOnce() -> Result<Completion, Failed> + Send + 'static,
    ) -> Trial {
        let (installation, name) = (self.clone(), name.to_owned());
        Trial::ignorable_test(name.clone(), move || {
            let _turn = installation.state.blocking_lock();
            let _timed = Timed::start(&name);
            run()
        })
    }

    async fn stop(&self) {
        *self.state.lock().await = State::Stopped;
    }
}
