//! Periodic schedules become tasks: one task per occurrence, exactly once.
//!
//! Every Store Consumer runs this loop. Each turn reads the schedules whose
//! next occurrence falls before the end of the next turn and materialises
//! that occurrence: the store inserts the task (due at the occurrence) and
//! moves the schedule to its following occurrence in one transaction, and
//! only if the schedule still expects the occurrence this consumer read. With
//! several consumers the first wins and the others see `None`, so each
//! occurrence makes one task. Materialising one turn ahead means a task
//! exists before its occurrence and starts on time.
//!
//! After downtime a schedule may have missed occurrences. With `catch_up`
//! each one runs, oldest first; without, only the most recent runs and the
//! older ones are skipped.

use std::sync::Arc;
use std::time::Duration;

use waft_core::CronSchedule;
use waft_store::{Cron, CronMaterialize, Materialized, Millis, StoreError, TaskStore};

use crate::{Clock, DueSignal};

/// Schedules read per store call.
const BATCH: u32 = 100;
/// Occurrences materialised per turn at most, so a catch-up after a long
/// downtime shares the store with everything else.
const MAX_PER_TURN: usize = 1000;

/// Materialises periodic schedules into tasks.
pub struct Periodic {
    store: Arc<dyn TaskStore>,
    clock: Arc<dyn Clock>,
    due: Arc<dyn DueSignal>,
    interval: Duration,
}

/// What one turn did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeriodicReport {
    /// Tasks created.
    pub created: usize,
    /// Occurrences another consumer materialised first.
    pub lost: usize,
    /// Occurrences skipped: their task was refused.
    pub skipped: usize,
    /// The turn stopped at its cap: more occurrences are due.
    pub full: bool,
}

impl Periodic {
    /// Turns every `interval`, materialising up to one interval ahead;
    /// `due` is signalled when a task is due at once.
    pub fn new(
        store: Arc<dyn TaskStore>,
        clock: Arc<dyn Clock>,
        due: Arc<dyn DueSignal>,
        interval: Duration,
    ) -> Self {
        Self {
            store,
            clock,
            due,
            interval,
        }
    }

    /// One turn: every occurrence due before the next turn becomes a task.
    pub async fn run_once(&self) -> Result<PeriodicReport, StoreError> {
        let now = self.clock.now();
        let horizon = now.saturating_add(i64::try_from(self.interval.as_millis()).unwrap_or(0));
        let mut report = PeriodicReport::default();
        // The earliest occurrence materialised, for the consumer.
        let mut earliest: Option<Millis> = None;
        'turn: loop {
            let schedules = self.store.cron_due(horizon, BATCH).await?;
            if schedules.is_empty() {
                break;
            }
            let mut progressed = false;
            for schedule in schedules {
                let Some(step) = next_step(&schedule, now) else {
                    continue;
                };
                match self.store.cron_materialize(step.params).await {
                    Ok(Materialized::Created(task)) => {
                        tracing::debug!(schedule = %schedule.id, %task, occurrence = step.occurrence, "periodic task created");
                        report.created += 1;
                        earliest = Some(
                            earliest.map_or(step.occurrence, |e: Millis| e.min(step.occurrence)),
                        );
                    }
                    Ok(Materialized::AlreadyDone) => report.lost += 1,
                    Ok(Materialized::Skipped(why)) => {
                        tracing::warn!(schedule = %schedule.id, lambda = %schedule.lambda, occurrence = step.occurrence, %why, "periodic task refused; occurrence skipped (fix the schedule or the lambda's settings)");
                        report.skipped += 1;
                    }
                    Err(StoreError::CronNotFound(_)) => {}
                    Err(error) => {
                        tracing::warn!(schedule = %schedule.id, %error, "cannot create the periodic task; retrying next turn");
                        continue;
                    }
                }
                progressed = true;
                if report.created + report.lost + report.skipped >= MAX_PER_TURN {
                    report.full = true;
                    break 'turn;
                }
            }
            if !progressed {
                break;
            }
        }
        if let Some(at) = earliest {
            self.due.due(at).await;
        }
        Ok(report)
    }

    /// Turns until `shutdown` resolves; a failed turn is logged and retried.
    pub async fn run(&self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            let full = match self.run_once().await {
                Ok(report) => report.full,
                Err(error) => {
                    tracing::error!(%error, "periodic schedules turn failed");
                    false
                }
            };
            if full {
                continue;
            }
            tokio::select! {
                () = &mut shutdown => return,
                () = tokio::time::sleep(self.interval) => {}
            }
        }
    }
}

/// The occurrence a due schedule materialises next.
struct Step {
    occurrence: Millis,
    params: CronMaterialize,
}

fn next_step(schedule: &Cron, now: Millis) -> Option<Step> {
    let cron = match CronSchedule::parse(&schedule.cron, &schedule.timezone) {
        Ok(cron) => cron,
        Err(error) => {
            // Checked when the schedule was created; a stored one that no
            // longer parses is corrupt (or from a newer Waft).
            tracing::error!(schedule = %schedule.id, %error, "cannot evaluate a stored schedule");
            return None;
        }
    };
    let occurrence = if schedule.catch_up || schedule.next_at >= now {
        schedule.next_at
    } else {
        cron.latest_until(now)
            .map_or(schedule.next_at, |latest| latest.max(schedule.next_at))
    };
    // An expression with no later occurrence leaves the schedule dormant.
    let next_at = cron.next_after(occurrence).unwrap_or(Millis::MAX);
    Some(Step {
        occurrence,
        params: CronMaterialize {
            cron_id: schedule.id.clone(),
            expected: schedule.next_at,
            occurrence,
            next_at,
            now,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Millis = 60_000;
    /// 2026-03-09T08:30:00Z.
    const T: Millis = 1_773_045_000_000;

    fn every_minute(catch_up: bool, next_at: Millis) -> Cron {
        Cron {
            id: "s".into(),
            lambda: "l".into(),
            cron: "* * * * *".into(),
            timezone: "UTC".into(),
            payload: vec![],
            collection: None,
            key: None,
            priority: None,
            catch_up,
            next_at,
            created_at: T,
        }
    }

    #[test]
    fn an_upcoming_occurrence_runs_as_planned() {
        let step = next_step(&every_minute(false, T + MINUTE), T).unwrap();
        assert_eq!(
            (step.occurrence, step.params.expected, step.params.next_at),
            (T + MINUTE, T + MINUTE, T + 2 * MINUTE)
        );
    }

    #[test]
    fn catching_up_runs_the_oldest_missed_occurrence_first() {
        let step = next_step(&every_minute(true, T), T + 10 * MINUTE + 5).unwrap();
        assert_eq!((step.occurrence, step.params.next_at), (T, T + MINUTE));
    }

    #[test]
    fn skipping_runs_only_the_latest_missed_occurrence() {
        let step = next_step(&every_minute(false, T), T + 10 * MINUTE + 5).unwrap();
        assert_eq!(
            (step.occurrence, step.params.expected, step.params.next_at),
            (T + 10 * MINUTE, T, T + 11 * MINUTE)
        );
    }

    #[test]
    fn a_stored_schedule_that_does_not_parse_is_left_alone() {
        let mut schedule = every_minute(false, T);
        schedule.timezone = "Nowhere/Else".into();
        assert!(next_step(&schedule, T).is_none());
    }
}
