//! A deploy's check (`waft lambda deploy --check`): the journal of every
//! live task of a lambda replayed against new code before anything is
//! stored, so that a team knows which waiting tasks the new code can take
//! over and where the others part from it ([`DeployCheck`]).
//!
//! Each replay runs in the sandbox under the new version's limits and
//! grants, with the lambda's secrets (a replayed call's arguments may hold
//! one), and stops at the first call its journal does not answer
//! ([`Sandbox::replay_only`]): nothing reaches outside, nothing is written.
//! Replays run side by side on the runtime's guest threads, one a core,
//! over pages of journals read in two statements each.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::task::JoinSet;
use waft_core::LambdaConfig;
use waft_core::model::{
    CheckProgress, Checked, DEPARTURE_EXAMPLES, Departure, DeployCheck, JournaledTask,
    JournaledTasks, MoveReport, TaskCount, TaskMove, VersionCheck,
};
use waft_runtime::{
    Execution, KillSwitch, Outcome, PreparedLambda, RecordingHost, Sandbox, TaskHost, TaskInput,
};

use super::{Frontend, MAX_COMPONENT_BYTES};
use crate::{ServiceError, ServiceResult};

/// Tasks a page of journals holds at most.
const PAGE: u32 = 200;
/// Tasks one transaction moves.
const MOVE_BATCH: usize = 1000;

/// What replaying one task's journal on the new code found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Every call of the journal made again, in order.
    Clean,
    /// Parted from it at `seq`.
    Departs {
        seq: u32,
        recorded: String,
        instead: String,
        example: String,
    },
}

impl Frontend {
    /// The component checked as a deploy checks it, and instantiated once
    /// under the lambda's own limits, as a run would be.
    pub(super) async fn prepare(
        &self,
        name: &str,
        component: &[u8],
        config: &LambdaConfig,
    ) -> ServiceResult<PreparedLambda> {
        waft_core::task::check_lambda_name(name)
            .map_err(|error| ServiceError::InvalidArgument(error.to_string()))?;
        config
            .validate()
            .map_err(|error| ServiceError::InvalidArgument(format!("invalid config: {error}")))?;
        if component.len() > MAX_COMPONENT_BYTES {
            return Err(ServiceError::ResourceExhausted(format!(
                "the component is {} bytes; the limit is {MAX_COMPONENT_BYTES}",
                component.len()
            )));
        }
        let refused = |error: String| {
            ServiceError::InvalidArgument(format!("cannot deploy {name:?}: {error}"))
        };
        let prepared = self
            .runtime
            .prepare_with_limits(component, &config.limits)
            .await
            .map_err(|error| refused(error.to_string()))?;
        prepared.check_grants(&config.grants).map_err(refused)?;
        Ok(prepared)
    }

    /// Replays the journals of lambda `name`'s live tasks on `prepared`:
    /// the report, and the tasks that resume cleanly, with their journals'
    /// version.
    pub(super) async fn check_replays(
        &self,
        name: &str,
        prepared: PreparedLambda,
        config: &LambdaConfig,
        progress: &(dyn Fn(CheckProgress) + Send + Sync),
    ) -> ServiceResult<(DeployCheck, Vec<(Option<u32>, Checked)>)> {
        if self.store.lambda_get(name).await?.is_none() {
            return Err(ServiceError::NotFound(format!("no lambda {name}")));
        }
        let sandbox = Sandbox {
            limits: config.limits,
            grants: Arc::new(config.grants.clone()),
            secrets: Arc::new(
                self.secrets_in_clear(name, "to replay its journals with them")
                    .await?,
            ),
            replay_only: true,
            // A wait on timers alone ends the replay at once, as it would
            // suspend the task: a task asleep for a week is checked now.
            suspend_after: Some(std::time::Duration::ZERO),
            ..Sandbox::default()
        };
        let of = self.live_tasks(name).await?;
        let at_once = std::thread::available_parallelism().map_or(2, |n| n.get());
        let mut report = Report::default();
        let mut after = None;
        progress(CheckProgress { checked: 0, of });
        loop {
            let page = self
                .store
                .task_journals(JournaledTasks {
                    lambda: name.to_owned(),
                    after: after.clone(),
                    limit: PAGE,
                })
                .await?;
            let Some(last) = page.last() else {
                break;
            };
            after = Some(last.task.id.clone());
            let mut running = JoinSet::new();
            for task in page {
                if running.len() >= at_once
                    && let Some(done) = running.join_next().await
                {
                    report.add(joined(done)?);
                }
                let (prepared, sandbox) = (prepared.clone(), sandbox.clone());
                running.spawn(async move { replay(&prepared, &sandbox, task).await });
            }
            while let Some(done) = running.join_next().await {
                report.add(joined(done)?);
            }
            progress(CheckProgress {
                checked: report.checked,
                of: of.max(report.checked),
            });
        }
        Ok(report.finish(name))
    }

    /// Moves the live tasks of lambda `name` whose journals replay cleanly
    /// on version `to` to that version; the others stay on the versions
    /// that wrote them.
    pub(super) async fn move_clean(
        &self,
        name: &str,
        to: Option<u32>,
        progress: &(dyn Fn(CheckProgress) + Send + Sync),
    ) -> ServiceResult<MoveReport> {
        let target = match to {
            Some(version) => self.store.lambda_get_version(name, version).await?,
            None => self.store.lambda_get(name).await?,
        };
        let Some(target) = target else {
            let which = to.map_or("".to_owned(), |v| format!(" version {v}"));
            return Err(ServiceError::NotFound(format!("no lambda {name}{which}")));
        };
        let Some(component) = self.store.component_get(&target.digest).await? else {
            return Err(ServiceError::Internal(format!(
                "the component of {name} version {} is missing",
                target.version
            )));
        };
        let prepared = self.prepare(name, &component, &target.config).await?;
        let (check, clean) = self
            .check_replays(name, prepared, &target.config, progress)
            .await?;
        // Those on it already stay, as they are.
        let tasks: Vec<Checked> = clean
            .into_iter()
            .filter(|(version, _)| *version != Some(target.version))
            .map(|(_, task)| task)
            .collect();
        let mut moved = 0;
        for batch in tasks.chunks(MOVE_BATCH) {
            moved += self
                .store
                .task_move(TaskMove {
                    lambda: name.to_owned(),
                    to: target.version,
                    tasks: batch.to_vec(),
                })
                .await?;
        }
        tracing::info!(
            lambda = name,
            to = target.version,
            moved,
            "moved waiting tasks"
        );
        Ok(MoveReport {
            to: target.version,
            changed: tasks.len() as u64 - moved,
            moved,
            check,
        })
    }

    /// The lambda's live tasks now: what a check's progress counts towards.
    async fn live_tasks(&self, name: &str) -> ServiceResult<u64> {
        let counts = self
            .store
            .task_count(TaskCount {
                lambda: name.to_owned(),
                ..TaskCount::default()
            })
            .await?;
        Ok(counts
            .iter()
            .filter(|count| waft_core::machine::LIVE.contains(count.status))
            .map(|count| count.count)
            .sum())
    }
}

/// One task's replay: the version that wrote its journal, the task as it
/// was replayed, and the verdict.
type Replayed = (Option<u32>, Checked, Verdict);

fn joined(done: Result<Replayed, tokio::task::JoinError>) -> ServiceResult<Replayed> {
    done.map_err(|e| ServiceError::Internal(format!("a replay stopped: {e}")))
}

/// Replays `task`'s journal on the new code: its version, id and verdict.
async fn replay(
    prepared: &PreparedLambda,
    sandbox: &Sandbox,
    journaled: JournaledTask,
) -> Replayed {
    let JournaledTask {
        task,
        journal_version,
        entries,
    } = journaled;
    let version = journal_version.or(task.version);
    // The calls alone are kept: the entries, answers and all, go to the run.
    let recorded: Vec<String> = entries.iter().map(|e| e.call.clone()).collect();
    let input = TaskInput {
        id: task.id.clone(),
        lambda: task.lambda,
        collection: task.collection,
        priority: task.priority,
        // The attempt its next execution sees: a claim counts one more (a
        // suspension gave its own back).
        attempt: task.attempt.saturating_add(1),
        scheduled_at: std::time::UNIX_EPOCH
            + std::time::Duration::from_millis(u64::try_from(task.scheduled_at).unwrap_or(0)),
        payload: task.payload,
        journal: entries,
    };
    let host: Arc<dyn TaskHost> = Arc::new(RecordingHost::default());
    let execution = prepared
        .run_on_guest_threads(input, sandbox, host, &KillSwitch::new())
        .await;
    let recorded: Vec<&str> = recorded.iter().map(String::as_str).collect();
    let checked = Checked {
        id: task.id,
        lease_token: task.lease_token,
        journal_len: u32::try_from(recorded.len()).unwrap_or(u32::MAX),
    };
    (version, checked, verdict(&recorded, &execution))
}

/// What an execution of the new code on a journal of `recorded` calls
/// says of it. Clean when it made every call of the journal: it stopped
/// at the first call past them (or at a call the journal holds no answer
/// for), or ended, or suspended, after them all. Otherwise it parted at
/// the entry it diverged at, or at the first entry it did not reach.
pub(super) fn verdict(recorded: &[&str], execution: &Execution) -> Verdict {
    if let Some(divergence) = &execution.divergence {
        return Verdict::Departs {
            seq: divergence.seq,
            recorded: divergence.recorded.clone(),
            instead: divergence.called.clone(),
            example: divergence
                .to_string()
                .replace("the lambda called", "the new code calls"),
        };
    }
    if execution.journal_end.is_some() || execution.replayed as usize >= recorded.len() {
        return Verdict::Clean;
    }
    let seq = execution.replayed;
    let at = recorded.get(seq as usize).copied().unwrap_or_default();
    let instead = match &execution.outcome {
        Outcome::Success { .. } | Outcome::Retriable { .. } | Outcome::Fatal { .. } => {
            format!("its end ({})", execution.outcome.kind())
        }
        Outcome::Suspended { .. } => "a wait".to_owned(),
        other => other.kind().to_owned(),
    };
    let why = match &execution.outcome {
        Outcome::Trapped { message }
        | Outcome::Killed { reason: message }
        | Outcome::HostError { message }
        | Outcome::Diverged { message } => format!(": {message}"),
        Outcome::LimitExceeded { detail, .. } => format!(": {detail}"),
        _ => String::new(),
    };
    Verdict::Departs {
        seq,
        recorded: at.to_owned(),
        example: format!(
            "departs at entry {seq}: the journal has {at}, the new code comes to {instead}{why}"
        ),
        instead,
    }
}

/// The verdicts gathered by version and place.
#[derive(Default)]
struct Report {
    checked: u64,
    versions: BTreeMap<Option<u32>, Versioned>,
    /// The tasks that resume cleanly, with their journals' version.
    clean: Vec<(Option<u32>, Checked)>,
}

#[derive(Default)]
struct Versioned {
    clean: u64,
    departures: BTreeMap<(u32, String, String), Departure>,
}

impl Report {
    fn add(&mut self, (version, checked, verdict): Replayed) {
        self.checked += 1;
        let versioned = self.versions.entry(version).or_default();
        let id = checked.id.clone();
        match verdict {
            Verdict::Clean => {
                versioned.clean += 1;
                self.clean.push((version, checked));
            }
            Verdict::Departs {
                seq,
                recorded,
                instead,
                example,
            } => {
                let departure = versioned
                    .departures
                    .entry((seq, recorded.clone(), instead.clone()))
                    .or_insert_with(|| Departure {
                        seq,
                        recorded,
                        instead,
                        example,
                        count: 0,
                        tasks: Vec::new(),
                    });
                departure.count += 1;
                // The first ids, whatever order the replays ended in.
                departure.tasks.push(id);
                if departure.tasks.len() > DEPARTURE_EXAMPLES {
                    departure.tasks.sort();
                    departure.tasks.pop();
                }
            }
        }
    }

    fn finish(self, lambda: &str) -> (DeployCheck, Vec<(Option<u32>, Checked)>) {
        let versions = self.versions.into_iter().map(|(version, versioned)| {
            let mut departures: Vec<Departure> = versioned.departures.into_values().collect();
            departures.sort_by(|a, b| b.count.cmp(&a.count).then(a.seq.cmp(&b.seq)));
            for departure in &mut departures {
                departure.tasks.sort();
            }
            VersionCheck {
                version,
                clean: versioned.clean,
                departures,
            }
        });
        let check = DeployCheck {
            lambda: lambda.to_owned(),
            checked: self.checked,
            versions: versions.collect(),
        };
        (check, self.clean)
    }
}

#[cfg(test)]
mod tests {
    use waft_runtime::{Divergence, Parting};

    use super::*;

    fn ended(outcome: Outcome, replayed: u32) -> Execution {
        Execution {
            outcome,
            replayed,
            ..Execution::host_error("")
        }
    }

    const JOURNAL: [&str; 3] = [
        "wasi:clocks/wall-clock.now",
        "wasi:random/random.get-random-u64",
        "waft:lambda/signals.wait",
    ];

    #[test]
    fn a_replay_that_makes_every_call_is_clean() {
        // Stopped at the first call past the journal.
        let mut stopped = ended(Outcome::Killed { reason: "".into() }, 3);
        stopped.journal_end = Some((3, "wasi:http/outgoing-handler.handle".into()));
        assert_eq!(verdict(&JOURNAL, &stopped), Verdict::Clean);
        // Or at a call the journal holds no answer for, at its place.
        stopped.journal_end = Some((2, JOURNAL[2].into()));
        stopped.replayed = 2;
        assert_eq!(verdict(&JOURNAL, &stopped), Verdict::Clean);
        // Ended, or suspended again, once every entry was replayed.
        let output = Outcome::Success { output: None };
        assert_eq!(verdict(&JOURNAL, &ended(output, 3)), Verdict::Clean);
    }

    #[test]
    fn a_replay_departs_where_it_diverges_or_stops_short() {
        let mut diverged = ended(
            Outcome::Diverged {
                message: "…".into(),
            },
            1,
        );
        diverged.divergence = Some(Divergence {
            seq: 1,
            recorded: JOURNAL[1].into(),
            summary: "42".into(),
            called: "wasi:http/outgoing-handler.handle".into(),
            parting: Parting::OtherCall,
        });
        assert_eq!(
            verdict(&JOURNAL, &diverged),
            Verdict::Departs {
                seq: 1,
                recorded: JOURNAL[1].into(),
                instead: "wasi:http/outgoing-handler.handle".into(),
                example: "diverged at entry 1: the journal has \
                          wasi:random/random.get-random-u64 (42), the new code calls \
                          wasi:http/outgoing-handler.handle"
                    .into(),
            }
        );
        let early = ended(Outcome::Success { output: None }, 2);
        let Verdict::Departs {
            seq,
            recorded,
            instead,
            ..
        } = verdict(&JOURNAL, &early)
        else {
            panic!("an end before the journal's is a departure");
        };
        assert_eq!((seq, recorded.as_str()), (2, JOURNAL[2]));
        assert_eq!(instead, "its end (success)");
        let trapped = ended(
            Outcome::Trapped {
                message: "unreachable".into(),
            },
            0,
        );
        let Verdict::Departs { example, .. } = verdict(&JOURNAL, &trapped) else {
            panic!("a trap before the journal's end is a departure");
        };
        assert!(example.ends_with("trapped: unreachable"), "{example}");
    }

    #[test]
    fn departures_group_by_version_and_place_naming_the_first_tasks() {
        let task = |id: &str| Checked {
            id: id.into(),
            ..Checked::default()
        };
        let mut report = Report::default();
        let departs = |seq: u32| Verdict::Departs {
            seq,
            recorded: "a".into(),
            instead: "b".into(),
            example: format!("at {seq}"),
        };
        for n in (0..30).rev() {
            report.add((Some(1), task(&format!("t{n:02}")), departs(4)));
        }
        report.add((Some(1), task("u"), departs(2)));
        report.add((Some(1), task("v"), Verdict::Clean));
        report.add((Some(2), task("w"), Verdict::Clean));
        let (check, clean) = report.finish("mail");
        let clean: Vec<_> = clean.iter().map(|(v, t)| (*v, t.id.as_str())).collect();
        assert_eq!(clean, [(Some(1), "v"), (Some(2), "w")]);
        assert_eq!((check.checked, check.departed()), (33, 31));
        let first = &check.versions[0];
        assert_eq!((first.version, first.clean), (Some(1), 1));
        assert_eq!(first.departures.len(), 2);
        assert_eq!(
            (first.departures[0].seq, first.departures[0].count),
            (4, 30)
        );
        let named: Vec<String> = (0..DEPARTURE_EXAMPLES)
            .map(|n| format!("t{n:02}"))
            .collect();
        assert_eq!(first.departures[0].tasks, named);
        assert_eq!(check.versions[1].version, Some(2));
    }
}
