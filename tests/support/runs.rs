//! When each instance really ran, from the execution journal every
//! executor keeps: the intervals the safety rule is checked on (no two
//! executions of a task at once). An instance whose process was killed
//! ended then.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use waft_services::JournalEvent;

use super::Cluster;

/// One execution of a task, from an executor's journal.
#[derive(Debug, Clone)]
pub struct Run {
    pub task: String,
    pub lease: i64,
    /// The executor process.
    pub process: String,
    pub start: SystemTime,
    /// When the instance was gone: its end record, else when its process
    /// was killed, else now (still running).
    pub end: SystemTime,
    /// How it ended; `None` when it has no end record.
    pub outcome: Option<String>,
}

impl Cluster {
    /// Every execution the executors' journals record.
    pub fn runs(&self) -> Vec<Run> {
        let at = |us: i64| SystemTime::UNIX_EPOCH + Duration::from_micros(us.max(0) as u64);
        let mut runs = Vec::new();
        for process in self.processes.values() {
            let Some(path) = process.env("WAFT_EXECUTOR_JOURNAL") else {
                continue;
            };
            let records = waft_services::read_journal(path.as_ref()).unwrap_or_default();
            // Open executions by task and lease, oldest first.
            let mut open: BTreeMap<(String, i64), Vec<SystemTime>> = BTreeMap::new();
            for record in records {
                let key = (record.task, record.lease);
                match record.event {
                    JournalEvent::Start => open.entry(key).or_default().push(at(record.at_us)),
                    JournalEvent::End => {
                        let Some(starts) = open.get_mut(&key) else {
                            continue;
                        };
                        if starts.is_empty() {
                            continue;
                        }
                        let start = starts.remove(0);
                        runs.push(Run {
                            task: key.0,
                            lease: key.1,
                            process: process.name.clone(),
                            start,
                            end: at(record.at_us),
                            outcome: record.outcome,
                        });
                    }
                }
            }
            for ((task, lease), starts) in open {
                for start in starts {
                    let end = process
                        .killed_at
                        .iter()
                        .copied()
                        .find(|k| *k >= start)
                        .unwrap_or_else(SystemTime::now);
                    runs.push(Run {
                        task: task.clone(),
                        lease,
                        process: process.name.clone(),
                        start,
                        end,
                        outcome: None,
                    });
                }
            }
        }
        runs
    }

    /// The execution intervals of `task`, in order of their start.
    pub fn executions(&self, task: &str) -> Vec<(SystemTime, SystemTime)> {
        let mut intervals: Vec<_> = self
            .runs()
            .into_iter()
            .filter(|run| run.task == task)
            .map(|run| (run.start, run.end))
            .collect();
        intervals.sort();
        intervals
    }

    /// Asserts that no two executions of `task` overlapped in time.
    pub fn assert_no_overlap(&self, task: &str) -> usize {
        let intervals = self.executions(task);
        for pair in intervals.windows(2) {
            assert!(
                pair[0].1 <= pair[1].0,
                "two executions of {task} overlapped: {intervals:?}\n{}",
                self.logs()
            );
        }
        intervals.len()
    }
}
