//! A durable task's journal between the executor and the HSC: read whole
//! before the execution replays it, and written at each durability point
//! (and before a result too large to carry it).
//!
//! Both go through [`HscApi`], so `waft dev` and the distributed mode share
//! this path. Each message stays under
//! [`MAX_BATCH_BYTES`](waft_core::limits::MAX_BATCH_BYTES): a read is paged
//! (the HSC cuts each page to fit), and a write larger than one message is
//! sent as consecutive parts ([`JournalPart`]): the store stages each but
//! the last and changes the journal with the last, so an execution that
//! dies between two of them leaves the journal as it was — a tail it was
//! rewriting keeps every answer it held.
//!
//! The execution numbers the messages it sends under its lease, and the
//! store takes each only in its turn: a late copy of an earlier message
//! (a retried call whose first copy was held up) cannot undo what came
//! after it, and a copy of the last one taken is answered as written. So a
//! message whose answer was lost is sent again while the HSC is
//! unreachable, until the execution is stopped (its watchdog stops it when
//! heartbeats fail too) or the heartbeat timeout passes. A refusal means
//! the lease is gone; a message refused as out of turn (which only another
//! writer under the same lease could cause) stops the execution, which
//! reports what the store holds as its journal.

use std::time::Duration;

use tokio::time::Instant;
use waft_runtime::KillSwitch;
use waft_store::{ClaimedTask, JournalEntry, JournalPart, JournalWrite, Refusal};

use crate::batch::{self, Budget};
use crate::{HscApi, JournalCommit, JournalPage, ServiceError, ServiceResult};

/// Why a journal could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum JournalFailure {
    /// The execution no longer holds its task: it must stop and report
    /// nothing.
    LeaseLost(String),
    /// The HSC could not be reached in time, or refused the request as
    /// such: the words say which.
    Failed(String),
}

impl JournalFailure {
    pub(super) fn message(&self) -> &str {
        match self {
            JournalFailure::LeaseLost(message) | JournalFailure::Failed(message) => message,
        }
    }
}

/// Where a journal's calls go, and when to give up on an unreachable HSC.
pub(super) struct JournalLink<'a> {
    pub(super) hsc: &'a dyn HscApi,
    pub(super) kill: &'a KillSwitch,
    /// How long to keep retrying an unreachable HSC.
    pub(super) patience: Duration,
}

impl JournalLink<'_> {
    /// The first `task.journal_len` entries of the task's journal, read
    /// under its lease, a page at a time.
    pub(super) async fn read(
        &self,
        task: &ClaimedTask,
    ) -> Result<Vec<JournalEntry>, JournalFailure> {
        let len = task.journal_len;
        let mut entries: Vec<JournalEntry> = Vec::with_capacity(len as usize);
        let give_up_at = Instant::now() + self.patience;
        while let Some(left) = len.checked_sub(entries.len() as u32).filter(|l| *l > 0) {
            let from = entries.len() as u32;
            let page = JournalPage {
                id: task.id.clone(),
                lease_token: task.lease_token,
                from,
                limit: left,
            };
            let answer = self
                .retrying(give_up_at, || self.hsc.task_journal_read(page.clone()))
                .await?;
            let page = answer.map_err(|refusal| lease_lost(&task.id, &refusal))?;
            if page.is_empty() {
                return Err(JournalFailure::Failed(format!(
                    "the journal of task {} ends at entry {from}, but its claim counted {len}",
                    task.id
                )));
            }
            for (expected, entry) in (from..).zip(&page) {
                if entry.seq != expected {
                    return Err(JournalFailure::Failed(format!(
                        "the journal of task {} came with entry {} where entry {expected} belongs",
                        task.id, entry.seq
                    )));
                }
            }
            let room = (len - from) as usize;
            entries.extend(page.into_iter().take(room));
        }
        Ok(entries)
    }

    /// Writes `write` to task `id`'s journal under `lease_token`, in as
    /// many consecutive parts as it takes, numbered on from `sent` (the
    /// messages this lease sent before); answers how many it has sent once
    /// the write landed.
    pub(super) async fn write(
        &self,
        id: &str,
        lease_token: i64,
        version: u32,
        sent: u32,
        write: JournalWrite,
    ) -> Result<u32, JournalFailure> {
        let give_up_at = Instant::now() + self.patience;
        let start = write.from;
        let parts = split(write);
        let count = parts.len();
        let mut sent = sent;
        for (index, write) in parts.into_iter().enumerate() {
            let commit = JournalCommit {
                id: id.to_owned(),
                lease_token,
                version,
                write,
                part: Some(JournalPart {
                    after: sent,
                    start,
                    more: index + 1 < count,
                }),
                generation: None,
            };
            self.retrying(give_up_at, || self.hsc.task_journal_write(commit.clone()))
                .await?
                .map_err(|refusal| lease_lost(id, &refusal))?;
            sent += 1;
        }
        Ok(sent)
    }

    /// `call`'s answer, asked again while the HSC is unreachable, until
    /// `give_up_at` or until the execution is stopped. (A signal's read
    /// goes through here too: see `host.rs`.)
    pub(super) async fn retrying<T, F>(
        &self,
        give_up_at: Instant,
        mut call: impl FnMut() -> F,
    ) -> Result<T, JournalFailure>
    where
        F: Future<Output = ServiceResult<T>>,
    {
        let mut pause = Duration::from_millis(20);
        loop {
            if let Some(reason) = self.kill.reason() {
                return Err(JournalFailure::LeaseLost(reason.to_owned()));
            }
            let answer = tokio::select! {
                answer = tokio::time::timeout_at(give_up_at, call()) => answer,
                () = self.kill.killed() => continue,
            };
            let error = match answer {
                Ok(Ok(answer)) => return Ok(answer),
                Ok(Err(error @ (ServiceError::Unavailable(_) | ServiceError::Internal(_)))) => {
                    error
                }
                Ok(Err(error)) => {
                    return Err(JournalFailure::Failed(format!(
                        "the HSC refused the call: {error}"
                    )));
                }
                Err(_) => ServiceError::Unavailable("no answer in time".into()),
            };
            if Instant::now() + pause >= give_up_at {
                return Err(JournalFailure::Failed(format!(
                    "cannot reach the HSC: {error}"
                )));
            }
            tracing::warn!(%error, "call to the HSC failed; retrying");
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = self.kill.killed() => {}
            }
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }
}

fn lease_lost(id: &str, refusal: &Refusal) -> JournalFailure {
    JournalFailure::LeaseLost(format!(
        "the HSC refused task {id}'s journal ({refusal:?}): the lease is lost"
    ))
}

/// `write` as consecutive writes of at most
/// [`MAX_BATCH_BYTES`](waft_core::limits::MAX_BATCH_BYTES) each (an
/// entry over it alone): the first replaces from `write.from`, each next one
/// starts where the one before ended. A write of no entries (a cut) stays
/// one write.
pub(super) fn split(write: JournalWrite) -> Vec<JournalWrite> {
    if write.entries.is_empty() {
        return vec![write];
    }
    let mut from = write.from;
    batch::cut(write.entries, Budget::items(usize::MAX), |entry| {
        entry.wire_size()
    })
    .into_iter()
    .map(|entries| {
        let part = JournalWrite { from, entries };
        from = part.end();
        part
    })
    .collect()
}

#[cfg(test)]
mod parts;

#[cfg(test)]
pub(super) mod tests {
    use std::sync::Mutex;

    use waft_core::limits::MAX_BATCH_BYTES;
    use waft_store::{ClaimedTask, Heartbeat, TaskResult};

    use super::*;
    use crate::journal_entry;

    /// Bytes a journal write weighs in a message.
    fn weight(write: &JournalWrite) -> usize {
        write.entries.iter().map(JournalEntry::wire_size).sum()
    }

    #[test]
    fn a_large_write_goes_as_consecutive_writes_within_a_message_each() {
        let big = 6 << 20;
        let write = JournalWrite {
            from: 4,
            entries: (4..9).map(|seq| journal_entry(seq, big)).collect(),
        };
        let parts = split(write.clone());
        assert_eq!(parts.len(), 3, "two entries of 6 MiB to a message");
        assert_eq!(parts[0].from, 4);
        for pair in parts.windows(2) {
            assert_eq!(pair[1].from, pair[0].end());
        }
        for part in &parts {
            assert!(weight(part) <= MAX_BATCH_BYTES);
        }
        let rejoined: Vec<JournalEntry> = parts.into_iter().flat_map(|p| p.entries).collect();
        assert_eq!(rejoined, write.entries);
        // A cut stays one write; a small write is one.
        let cut = JournalWrite {
            from: 2,
            entries: Vec::new(),
        };
        assert_eq!(split(cut.clone()), vec![cut]);
        let small = JournalWrite {
            from: 0,
            entries: vec![journal_entry(0, 10), journal_entry(1, 10)],
        };
        assert_eq!(split(small.clone()), vec![small]);
    }

    /// An HSC holding one journal as the store does (parts staged until
    /// the last, each message taken in its turn); refuses everything once
    /// `lost`, fails the first `failures` calls as unreachable, loses the
    /// answers of the first `lost_answers` writes it takes, and pages by
    /// `page`.
    #[derive(Default)]
    pub(in crate::executor) struct JournalHsc {
        pub(in crate::executor) journal: Mutex<Vec<JournalEntry>>,
        pub(in crate::executor) writes: Mutex<Vec<JournalCommit>>,
        pub(in crate::executor) lost: bool,
        pub(in crate::executor) failures: Mutex<u32>,
        pub(in crate::executor) lost_answers: Mutex<u32>,
        /// The messages of the lease's writes taken.
        pub(in crate::executor) taken: Mutex<u32>,
        pub(in crate::executor) staged: Mutex<Vec<JournalEntry>>,
        pub(in crate::executor) page: usize,
    }

    impl JournalHsc {
        fn unreachable(&self) -> ServiceResult<()> {
            let mut failures = self.failures.lock().unwrap();
            if *failures > 0 {
                *failures -= 1;
                return Err(ServiceError::Unavailable("down".into()));
            }
            Ok(())
        }
    }

    #[async_trait::async_trait]
    impl HscApi for JournalHsc {
        async fn task_claim_many(
            &self,
            _: Vec<(String, i64)>,
        ) -> ServiceResult<Vec<Result<ClaimedTask, Refusal>>> {
            unreachable!("journals only")
        }

        async fn task_heartbeat_many(
            &self,
            _: Vec<Heartbeat>,
        ) -> ServiceResult<Vec<Result<(), Refusal>>> {
            unreachable!("journals only")
        }

        async fn task_set_result_many(
            &self,
            _: Vec<TaskResult>,
        ) -> ServiceResult<Vec<Result<waft_core::TaskStatus, Refusal>>> {
            unreachable!("journals only")
        }

        async fn task_journal_write(
            &self,
            commit: JournalCommit,
        ) -> ServiceResult<Result<(), Refusal>> {
            self.unreachable()?;
            if self.lost {
                return Ok(Err(Refusal::StaleLease { current: 9 }));
            }
            let part = commit.part.expect("each message names its part");
            let mut taken = self.taken.lock().unwrap();
            if *taken == part.after + 1 {
                return Ok(Ok(()));
            }
            if *taken != part.after {
                return Err(ServiceError::FailedPrecondition(format!(
                    "the journal took {taken} writes, this one follows {}",
                    part.after
                )));
            }
            *taken += 1;
            let mut staged = self.staged.lock().unwrap();
            if commit.write.from == part.start {
                staged.clear();
            }
            staged.extend(commit.write.entries.iter().cloned());
            if !part.more {
                let mut journal = self.journal.lock().unwrap();
                journal.truncate(part.start as usize);
                journal.append(&mut staged);
            }
            self.writes.lock().unwrap().push(commit);
            let mut lost_answers = self.lost_answers.lock().unwrap();
            if *lost_answers > 0 {
                *lost_answers -= 1;
                return Err(ServiceError::Unavailable("the answer was lost".into()));
            }
            Ok(Ok(()))
        }

        async fn task_journal_read(
            &self,
            page: JournalPage,
        ) -> ServiceResult<Result<Vec<JournalEntry>, Refusal>> {
            self.unreachable()?;
            if self.lost {
                return Ok(Err(Refusal::StaleLease { current: 9 }));
            }
            let journal = self.journal.lock().unwrap();
            let from = (page.from as usize).min(journal.len());
            let to = (from + self.page.min(page.limit as usize)).min(journal.len());
            Ok(Ok(journal[from..to].to_vec()))
        }
        async fn task_signal_read(
            &self,
            _: waft_store::TaskSignalRead,
        ) -> ServiceResult<Result<Option<Vec<u8>>, Refusal>> {
            unreachable!("journals only")
        }
        async fn task_children_read(
            &self,
            _: waft_store::TaskChildrenRead,
        ) -> ServiceResult<Result<waft_store::ChildrenState, Refusal>> {
            unreachable!("journals only")
        }
    }

    fn claimed(journal_len: u32) -> ClaimedTask {
        ClaimedTask {
            id: "t".into(),
            lambda: "pay".into(),
            lambda_version: 3,
            collection: "default".into(),
            priority: 0,
            payload: Vec::new(),
            attempt: 2,
            scheduled_at: 0,
            lease_token: 7,
            secrets_version: 0,
            journal_len,
            journal_generation: 0,
            trace: None,
        }
    }

    fn link<'a>(hsc: &'a JournalHsc, kill: &'a KillSwitch) -> JournalLink<'a> {
        JournalLink {
            hsc,
            kill,
            patience: Duration::from_secs(30),
        }
    }

    #[tokio::test]
    async fn a_journal_is_read_whole_a_page_at_a_time_through_outages() {
        let hsc = JournalHsc {
            journal: Mutex::new((0..25).map(|seq| journal_entry(seq, 3)).collect()),
            failures: Mutex::new(2),
            page: 10,
            ..JournalHsc::default()
        };
        let kill = KillSwitch::new();
        let read = link(&hsc, &kill).read(&claimed(25)).await.unwrap();
        assert_eq!(read, *hsc.journal.lock().unwrap());
        // Only what the claim counted.
        let read = link(&hsc, &kill).read(&claimed(12)).await.unwrap();
        assert_eq!(read.len(), 12);
        assert!(
            link(&hsc, &kill)
                .read(&claimed(0))
                .await
                .unwrap()
                .is_empty()
        );
        // Shorter than the claim said: a failure, not a short replay.
        let failure = link(&hsc, &kill).read(&claimed(30)).await.unwrap_err();
        assert!(matches!(failure, JournalFailure::Failed(m) if m.contains("ends at entry 25")));
    }

    #[tokio::test]
    async fn a_refusal_is_a_lost_lease() {
        let hsc = JournalHsc {
            journal: Mutex::new(vec![journal_entry(0, 1)]),
            lost: true,
            page: 10,
            ..JournalHsc::default()
        };
        let kill = KillSwitch::new();
        let link = link(&hsc, &kill);
        assert!(matches!(
            link.read(&claimed(1)).await,
            Err(JournalFailure::LeaseLost(_))
        ));
        let write = JournalWrite {
            from: 1,
            entries: vec![journal_entry(1, 1)],
        };
        assert!(matches!(
            link.write("t", 7, 3, 0, write).await,
            Err(JournalFailure::LeaseLost(_))
        ));
    }

    #[tokio::test]
    async fn writes_carry_the_lease_and_version_and_survive_an_outage() {
        let hsc = JournalHsc {
            failures: Mutex::new(3),
            page: 10,
            ..JournalHsc::default()
        };
        let kill = KillSwitch::new();
        let write = JournalWrite {
            from: 0,
            entries: vec![journal_entry(0, 1), journal_entry(1, 1)],
        };
        let sent = link(&hsc, &kill)
            .write("t", 7, 3, 0, write.clone())
            .await
            .unwrap();
        assert_eq!(sent, 1);
        let writes = hsc.writes.lock().unwrap().clone();
        assert_eq!(
            writes,
            [JournalCommit {
                id: "t".into(),
                lease_token: 7,
                version: 3,
                write,
                part: Some(JournalPart {
                    after: 0,
                    start: 0,
                    more: false,
                }),
                generation: None,
            }]
        );
    }

    #[tokio::test]
    async fn a_stopped_execution_writes_nothing() {
        let hsc = JournalHsc::default();
        let kill = KillSwitch::new();
        kill.kill("shutting down");
        let write = JournalWrite {
            from: 0,
            entries: vec![journal_entry(0, 1)],
        };
        let failure = link(&hsc, &kill).write("t", 7, 3, 0, write).await;
        assert_eq!(
            failure,
            Err(JournalFailure::LeaseLost("shutting down".into()))
        );
        assert!(hsc.writes.lock().unwrap().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn an_unreachable_hsc_is_given_up_on_after_the_patience() {
        let hsc = JournalHsc {
            failures: Mutex::new(u32::MAX),
            ..JournalHsc::default()
        };
        let kill = KillSwitch::new();
        let link = JournalLink {
            hsc: &hsc,
            kill: &kill,
            patience: Duration::from_secs(2),
        };
        let write = JournalWrite {
            from: 0,
            entries: vec![journal_entry(0, 1)],
        };
        let failure = link.write("t", 7, 3, 0, write).await.unwrap_err();
        assert!(
            matches!(&failure, JournalFailure::Failed(m) if m.contains("cannot reach the HSC")),
            "{failure:?}"
        );
    }

    /// A write larger than a message goes as parts numbered on from the
    /// messages the lease sent before, each naming where the write starts;
    /// the journal changes once, with the last.
    #[tokio::test]
    async fn a_large_write_goes_as_numbered_parts_landed_by_the_last() {
        let recorded: Vec<_> = (0..6).map(|seq| journal_entry(seq, 1)).collect();
        let hsc = JournalHsc {
            journal: Mutex::new(recorded.clone()),
            taken: Mutex::new(4),
            page: 10,
            ..JournalHsc::default()
        };
        let kill = KillSwitch::new();
        let write = JournalWrite {
            from: 2,
            entries: (2..5).map(|seq| journal_entry(seq, 6 << 20)).collect(),
        };
        let sent = link(&hsc, &kill).write("t", 7, 3, 4, write.clone()).await;
        assert_eq!(sent, Ok(6));
        let parts: Vec<_> = hsc.writes.lock().unwrap().iter().map(|c| c.part).collect();
        let part = |after, more| {
            Some(JournalPart {
                after,
                start: 2,
                more,
            })
        };
        assert_eq!(parts, [part(4, true), part(5, false)]);
        let mut expected = recorded[..2].to_vec();
        expected.extend(write.entries);
        assert!(*hsc.journal.lock().unwrap() == expected);
    }

    /// A message whose answer was lost is sent again and answered as
    /// written, taken once; one refused as out of its turn stops the write.
    #[tokio::test]
    async fn a_lost_answer_is_asked_again_and_a_write_out_of_turn_fails() {
        let hsc = JournalHsc {
            lost_answers: Mutex::new(1),
            page: 10,
            ..JournalHsc::default()
        };
        let kill = KillSwitch::new();
        let first = JournalWrite {
            from: 0,
            entries: vec![journal_entry(0, 1)],
        };
        assert_eq!(link(&hsc, &kill).write("t", 7, 3, 0, first).await, Ok(1));
        assert_eq!(hsc.writes.lock().unwrap().len(), 1, "taken once");
        // Another writer under the same lease took messages meanwhile.
        *hsc.taken.lock().unwrap() = 3;
        let next = JournalWrite {
            from: 1,
            entries: vec![journal_entry(1, 1)],
        };
        let failure = link(&hsc, &kill).write("t", 7, 3, 1, next).await;
        assert!(
            matches!(&failure, Err(JournalFailure::Failed(m)) if m.contains("refused")),
            "{failure:?}"
        );
        assert_eq!(hsc.journal.lock().unwrap().len(), 1);
    }
}
