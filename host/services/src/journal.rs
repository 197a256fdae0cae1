//! The execution journal: an executor's own record of when each instance
//! ran, outside the store.
//!
//! The store knows when a task was claimed and when a result arrived; only
//! the executor knows when an instance really started and when it was
//! gone. The journal writes one JSON line when an execution starts (before
//! the guest's first instruction) and one when it ends (after the instance
//! is dropped, whether it returned, was stopped by its watchdog or was
//! killed), so an auditor can prove from the executors' side that no two
//! executions of a task overlapped and that every accepted result came
//! from an execution that really ran. An execution that has a start and
//! no end ended with its process.
//!
//! Each line is one `write(2)` to a file opened for appending, so records
//! survive a crash of the process (not of the machine: nothing is synced)
//! and lines from concurrent executions never interleave.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::lock;

/// One line of the journal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalRecord {
    /// `start` or `end`.
    pub event: JournalEvent,
    pub task: String,
    pub lease: i64,
    /// The executor process that ran it.
    pub pid: u32,
    /// Microseconds since the Unix epoch.
    pub at_us: i64,
    /// On `start`: the attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// On `end`: how it ended, as the runtime names it (`success`,
    /// `retriable`, `fatal`, `limit-memory`, `trapped`, `killed`, …), or
    /// `stopped` when its watchdog stopped it and nothing was reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
}

/// Whether a record opens or closes an execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JournalEvent {
    Start,
    End,
}

/// An open journal file.
#[derive(Debug)]
pub struct ExecutionJournal {
    path: PathBuf,
    file: Mutex<File>,
}

impl ExecutionJournal {
    /// Opens (creating it if needed) the journal at `path` for appending.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self {
            path: path.to_owned(),
            file: Mutex::new(file),
        })
    }

    /// Records that an execution starts now.
    pub fn started(&self, task: &str, lease: i64, attempt: u32) {
        self.write(JournalRecord {
            event: JournalEvent::Start,
            task: task.to_owned(),
            lease,
            pid: std::process::id(),
            at_us: micros(SystemTime::now()),
            attempt: Some(attempt),
            outcome: None,
        });
    }

    /// Records that an execution's instance was gone at `at` (as the
    /// runtime saw it: this record may be written later).
    pub fn ended(&self, task: &str, lease: i64, outcome: &str, at: SystemTime) {
        self.write(JournalRecord {
            event: JournalEvent::End,
            task: task.to_owned(),
            lease,
            pid: std::process::id(),
            at_us: micros(at),
            attempt: None,
            outcome: Some(outcome.to_owned()),
        });
    }

    fn write(&self, record: JournalRecord) {
        let mut line = serde_json::to_vec(&record).expect("a journal record serializes");
        line.push(b'\n');
        if let Err(error) = lock(&self.file).write_all(&line) {
            tracing::error!(path = %self.path.display(), %error, "cannot write the execution journal");
        }
    }
}

/// Reads a journal; lines that do not parse (a record cut by a full disk)
/// are skipped.
pub fn read_journal(path: &Path) -> std::io::Result<Vec<JournalRecord>> {
    let text = std::fs::read_to_string(path)?;
    Ok(text
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect())
}

fn micros(at: SystemTime) -> i64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_one_line_each() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        let journal = ExecutionJournal::open(&path).unwrap();
        journal.started("t1", 7, 2);
        journal.ended("t1", 7, "success", SystemTime::now());
        drop(journal);
        // Reopening appends.
        ExecutionJournal::open(&path).unwrap().started("t2", 1, 1);
        let records = read_journal(&path).unwrap();
        assert_eq!(records.len(), 3);
        assert_eq!(records[0].event, JournalEvent::Start);
        assert_eq!(records[0].attempt, Some(2));
        assert_eq!(records[1].outcome.as_deref(), Some("success"));
        assert!(records[0].at_us <= records[1].at_us);
        assert_eq!(records[2].task, "t2");
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 3);
    }
}
