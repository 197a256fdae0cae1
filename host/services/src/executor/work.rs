//! The Executor's work loop: keep the list of lambdas fresh, ask the
//! Controller for work while there is room, start what it hands out, and
//! on shutdown let running tasks finish within the grace period.
//!
//! Each turn does one thing and comes back: take a finished refresh of the
//! lambdas, begin the next one when due, send a `NextWork` poll for free
//! slots, or wait for whatever changes that (a freed slot, a list, a
//! deploy, a poll's answer, a retry's time).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::{JoinError, JoinHandle, JoinSet};
use tokio::time::Instant;
use waft_runtime::KillSwitch;
use waft_store::{ClaimedTask, Lambda, TaskResult};

use super::Executor;
use super::reporter::ResultReporter;
use super::slots::{MAX_POLLS, Reserved};
use crate::{NextWork, ServiceResult};

/// A poll's answer, with when it was sent.
type Answer = (std::time::Instant, ServiceResult<Vec<ClaimedTask>>);

/// The running tasks' kill switches, by task and lease.
type Kills = Arc<Mutex<HashMap<(String, i64), KillSwitch>>>;

/// What the loop keeps between turns.
struct WorkLoop {
    lambdas: Vec<Lambda>,
    refreshed: Option<Instant>,
    /// The lambdas are re-read beside the loop: a slow Frontend must not
    /// hold up tasks already handed out, whose claims are running out.
    refreshing: Option<JoinHandle<ServiceResult<Vec<Lambda>>>>,
    /// A deploy was reported since the last refresh began: refresh again.
    stale: bool,
    polls: JoinSet<Answer>,
    reserved: Reserved,
    failures: u32,
    retry_at: Instant,
    results: mpsc::UnboundedSender<TaskResult>,
    kills: Kills,
}

impl Executor {
    /// Takes and runs work until `shutdown` resolves, then lets running
    /// tasks finish within the grace period, stops the rest and delivers
    /// the last results.
    ///
    /// Several `NextWork` long polls may be out at once, each for slots no
    /// other holds: when a task ends while a poll waits for other lambdas'
    /// work, the freed slot is asked for at once instead of after that
    /// poll's wait.
    pub async fn run(self: Arc<Self>, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        let (results, reporter) = ResultReporter::start(self.hsc.clone(), self.config.heartbeat);
        let mut work = WorkLoop {
            lambdas: Vec::new(),
            refreshed: None,
            refreshing: None,
            stale: false,
            polls: JoinSet::new(),
            reserved: Reserved::default(),
            failures: 0,
            retry_at: Instant::now(),
            results,
            kills: Kills::default(),
        };
        let following = tokio::spawn(crate::changes::follow(
            self.frontend.clone(),
            self.lambdas_changed.clone(),
        ));
        loop {
            self.take_refresh(&mut work).await;
            if self.refresh_when_due(&mut work) && work.lambdas.is_empty() {
                // Nothing to ask for yet: wait for the first list.
                tokio::select! {
                    () = &mut shutdown => break,
                    () = self.refreshed_list.notified() => continue,
                }
            }
            if self.ask_for_work(&mut work) {
                continue;
            }
            // Wake for a retry, a refresh, a freed slot or an answer.
            let wake_at = if Instant::now() < work.retry_at {
                work.retry_at
            } else {
                Instant::now() + self.config.refresh
            };
            tokio::select! {
                () = &mut shutdown => break,
                () = self.freed.notified() => {}
                () = self.refreshed_list.notified() => {}
                () = self.lambdas_changed.notified() => work.stale = true,
                () = tokio::time::sleep_until(wake_at) => {}
                Some(joined) = work.polls.join_next_with_id(), if !work.polls.is_empty() => {
                    self.take_answer(&mut work, joined);
                }
            }
        }
        following.abort();
        // A poll cut short may have claimed tasks nobody will run: they
        // come back after the claim timeout.
        work.polls.abort_all();
        self.drain(&work.kills).await;
        drop(work);
        let _ = reporter.await;
    }

    /// Takes the list of lambdas when its refresh has ended. A version
    /// deployed since the last list is loaded before its first task; what
    /// was kept of a lambda no longer listed (deleted) is forgotten.
    async fn take_refresh(self: &Arc<Self>, work: &mut WorkLoop) {
        let Some(refreshing) = work.refreshing.take_if(|r| r.is_finished()) else {
            return;
        };
        match refreshing.await {
            Ok(Ok(list)) => {
                if work.refreshed.is_some() {
                    self.preload_new(&work.lambdas, &list);
                }
                let names: HashSet<&str> = list.iter().map(|l| l.name.as_str()).collect();
                let listed = |name: &str| names.contains(name);
                self.versions.keep_only(listed);
                self.secrets.keep_only(listed);
                work.lambdas = list;
                work.refreshed = Some(Instant::now());
            }
            Ok(Err(error)) => {
                tracing::warn!(%error, "executor cannot list lambdas");
                work.refreshed = Some(Instant::now());
            }
            Err(error) => tracing::error!(%error, "listing lambdas failed"),
        }
    }

    /// Begins a refresh of the lambdas when a deploy was reported or the
    /// last one is `refresh` old; whether it began.
    fn refresh_when_due(&self, work: &mut WorkLoop) -> bool {
        let due = work.stale
            || work
                .refreshed
                .is_none_or(|at| at.elapsed() >= self.config.refresh);
        if work.refreshing.is_some() || !due {
            return false;
        }
        work.stale = false;
        let frontend = self.frontend.clone();
        let done = self.refreshed_list.clone();
        work.refreshing = Some(tokio::spawn(async move {
            let list = frontend.lambda_list().await;
            done.notify_one();
            list
        }));
        true
    }

    /// Sends a `NextWork` poll for the free slots when one of them is of a
    /// lambda no outstanding poll names (see `slots`), unless the most
    /// polls are out, a retry must wait or there is no room; whether it
    /// sent one.
    fn ask_for_work(&self, work: &mut WorkLoop) -> bool {
        if work.polls.len() >= MAX_POLLS || Instant::now() < work.retry_at {
            return false;
        }
        let (slots, max_tasks) = self.slots(&work.lambdas, &work.reserved);
        if !work.reserved.names_news(&slots) {
            return false;
        }
        let request = NextWork {
            slots,
            max_tasks,
            wait: self.config.next_work_wait,
        };
        let controller = self.controller.clone();
        let held = request.clone();
        // A task's claim is made after this instant: its first fence counts
        // from here, however long the hand-out takes.
        let sent = std::time::Instant::now();
        let handle = work
            .polls
            .spawn(async move { (sent, controller.next_work(request).await) });
        work.reserved.add(handle.id(), held);
        true
    }

    /// A poll's answer: its room is free again, its tasks start; a failed
    /// poll is retried after a backoff that grows with failures in a row.
    fn take_answer(
        self: &Arc<Self>,
        work: &mut WorkLoop,
        joined: Result<(tokio::task::Id, Answer), JoinError>,
    ) {
        let (sent, answer) = match joined {
            Ok((id, answer)) => {
                work.reserved.remove(id);
                answer
            }
            Err(error) => {
                work.reserved.remove(error.id());
                tracing::error!(%error, "a work request failed");
                return;
            }
        };
        match answer {
            Ok(tasks) => {
                work.failures = 0;
                for task in tasks {
                    self.start(task, sent, &work.results, &work.kills);
                }
            }
            Err(error) => {
                work.failures += 1;
                tracing::warn!(%error, "cannot get work from the controller");
                work.retry_at = Instant::now() + Duration::from_millis(50 << work.failures.min(6));
            }
        }
    }
}
