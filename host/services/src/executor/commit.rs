//! An execution's writes of its task's journal, through its host: each
//! durability point's write (which stops the execution when it fails), and
//! the tail a result carries — written ahead of the result, on its own, when
//! it would make the result larger than one message.
//!
//! Apart from `host.rs` because it is the execution's side of a write —
//! which message it numbers next, where it then knows the journal ends, and
//! what a failed write does to it; `durable.rs` below it speaks to the HSC.

use std::sync::atomic::Ordering;

use waft_core::limits::MAX_BATCH_BYTES;
use waft_store::{JournalWrite, TaskResult};

use super::durable::{JournalFailure, JournalLink};
use super::host::ExecutionHost;
use crate::batch::WireSize;

impl ExecutionHost {
    /// Writes `write` to the task's journal; on failure the execution is
    /// stopped, with the reason.
    pub(super) async fn commit(&self, write: JournalWrite) -> Result<(), JournalFailure> {
        let end = write.end();
        let link = JournalLink {
            hsc: self.hsc.as_ref(),
            kill: &self.kill,
            patience: self.journal_patience,
        };
        let sent = self.journal_sent.load(Ordering::Acquire);
        match link
            .write(&self.task_id, self.lease_token, self.version, sent, write)
            .await
        {
            Ok(sent) => {
                self.journal_sent.store(sent, Ordering::Release);
                self.journal_end.store(end, Ordering::Release);
                Ok(())
            }
            Err(failure) => {
                let reason = format!("cannot write the task's journal: {}", failure.message());
                if self.kill.kill(reason) {
                    tracing::warn!(task = %self.task_id, lease = self.lease_token, ?failure, "journal write failed; stopping the execution");
                }
                Err(failure)
            }
        }
    }

    /// Where the task's journal ends, as far as this execution knows.
    pub(super) fn journal_end(&self) -> u32 {
        self.journal_end.load(Ordering::Acquire)
    }

    /// `result` as one message carries it: when its journal would make it
    /// larger than a batch, the journal is written first, on its own (in as
    /// many messages as it takes), and the result goes without it. `None`
    /// when the lease was lost meanwhile: there is nothing to report.
    pub(super) async fn carried(&self, mut result: TaskResult) -> Option<TaskResult> {
        // Whatever the result, the children the lambda was told of exist
        // before it is reported.
        if let Err(reason) = self.write_children().await {
            tracing::warn!(task = %result.id, %reason, "reporting nothing");
            return None;
        }
        if result.wire_size() <= MAX_BATCH_BYTES {
            return Some(result);
        }
        let Some(journal) = result.journal.take() else {
            // Too large without a journal: the reporter fits it.
            return Some(result);
        };
        match self.commit(journal).await {
            Ok(()) => Some(result),
            Err(JournalFailure::LeaseLost(reason)) => {
                tracing::warn!(task = %result.id, %reason, "the lease was lost before the result; reporting nothing");
                None
            }
            // Only entries that reached nothing outside wait for the result
            // (the others were written before the lambda saw them): without
            // them the next attempt makes those calls live again.
            Err(JournalFailure::Failed(reason)) => {
                tracing::warn!(task = %result.id, %reason, "the journal's tail is lost; reporting the result without it");
                Some(result)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use waft_runtime::TaskHost;
    use waft_store::JournalEntry;

    use super::super::durable::tests::JournalHsc;
    use super::super::host::tests::{host, result};
    use super::*;
    use crate::journal_entry;

    #[tokio::test]
    async fn a_result_that_fits_keeps_its_journal() {
        let hsc = Arc::new(JournalHsc::default());
        let host = host(hsc.clone(), 10).await;
        let write = JournalWrite {
            from: 4,
            entries: vec![journal_entry(4, 10)],
        };
        let carried = host.carried(result(10, write.clone())).await.unwrap();
        assert_eq!(carried.journal, Some(write));
        assert!(hsc.writes.lock().unwrap().is_empty());
    }

    /// A journal's tail that would make its result too large for a message
    /// is written first, in messages of its own, and the result goes
    /// without it.
    #[tokio::test]
    async fn a_journal_too_large_for_its_result_is_written_first() {
        let hsc = Arc::new(JournalHsc::default());
        let host = host(hsc.clone(), 10).await;
        let write = JournalWrite {
            from: 4,
            entries: (4..7).map(|seq| journal_entry(seq, 6 << 20)).collect(),
        };
        let carried = host.carried(result(10 << 20, write.clone())).await.unwrap();
        assert_eq!(carried.journal, None);
        assert_eq!(carried.replayed, 4);
        assert!(carried.wire_size() <= MAX_BATCH_BYTES);
        let writes = hsc.writes.lock().unwrap().clone();
        assert!(writes.len() >= 2, "{} writes", writes.len());
        assert!(
            writes
                .iter()
                .all(|w| (w.id.as_str(), w.lease_token, w.version) == ("t", 7, 3))
        );
        let written: Vec<JournalEntry> = writes.into_iter().flat_map(|w| w.write.entries).collect();
        assert_eq!(written, write.entries);
        assert_eq!(host.journal_end(), 7);
    }

    /// Refused on the way: the lease is gone, nothing is reported, and
    /// the execution is stopped with the reason.
    #[tokio::test]
    async fn a_refused_journal_leaves_nothing_to_report() {
        let hsc = Arc::new(JournalHsc {
            lost: true,
            ..JournalHsc::default()
        });
        let host = host(hsc, 10).await;
        let write = JournalWrite {
            from: 4,
            entries: (4..7).map(|seq| journal_entry(seq, 6 << 20)).collect(),
        };
        assert_eq!(host.carried(result(10 << 20, write)).await, None);
        assert!(host.kill.reason().unwrap().contains("journal"));
        // And a durability point hears it as a lost lease.
        let lost = host.journal(JournalWrite::default()).await.unwrap_err();
        assert!(lost.reason.contains("journal"), "{lost:?}");
    }
}
