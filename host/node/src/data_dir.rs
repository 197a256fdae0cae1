//! `waft dev`'s data directory, held by one process at a time.
//!
//! The process that runs every role on the directory's SQLite file carries
//! all of its tasks in flight: its in-process queues hold the enqueued
//! ones, its executors the running ones. Two such processes on one file
//! would each take the other's tasks for lost and run them again while
//! they still run. So the process holds an exclusive lock on `lock` in the
//! directory (`flock`, released by the kernel whenever the process ends,
//! `kill -9` included), and a second one is refused with the holder's pid.
//!
//! Holding the lock is also what lets a starting process recover at once:
//! whatever the store says is in flight was carried by a process that is
//! gone, so its tasks are due now ([`waft_store::TaskStore::task_recover`])
//! rather than when their enqueue, claim or heartbeat timeouts would have
//! said so.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::Path;

use crate::NodeError;

/// The lock file's name in the data directory.
const LOCK: &str = "lock";

/// The lock on a data directory, held until it is dropped.
#[derive(Debug)]
pub(crate) struct DataDirLock {
    _file: File,
}

/// Creates `dir` if needed and takes its lock, writing this process's pid
/// into it; refused while another process holds it.
pub(crate) fn hold(dir: &Path) -> Result<DataDirLock, NodeError> {
    let failed = |source| NodeError::DataDir {
        path: dir.to_owned(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(failed)?;
    let path = dir.join(LOCK);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(failed)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            let mut holder = String::new();
            // The pid the holder wrote; empty if it has not yet.
            let _ = file.read_to_string(&mut holder);
            return Err(NodeError::DataDirInUse {
                path: dir.to_owned(),
                holder: holder.trim().to_owned(),
            });
        }
        Err(TryLockError::Error(source)) => return Err(failed(source)),
    }
    file.set_len(0).map_err(failed)?;
    file.rewind().map_err(failed)?;
    writeln!(file, "{}", std::process::id()).map_err(failed)?;
    Ok(DataDirLock { _file: file })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_with_the_first_ones_pid() {
        let dir = tempfile::tempdir().unwrap();
        let first = hold(dir.path()).unwrap();
        // A second open file description conflicts as another process's
        // would: flock locks belong to the open file, not the process.
        let error = hold(dir.path()).unwrap_err();
        let message = error.to_string();
        assert!(
            message.contains(&std::process::id().to_string()),
            "{message}"
        );
        assert!(message.contains("--data-dir"), "{message}");
        drop(first);
        hold(dir.path()).expect("free again once the holder is gone");
    }
}
