//! A durable lambda's side of the model: journal writes under a lease, in
//! their turns, the children a task made, the fan-in that wakes a parent
//! once its children end, and signals.

use super::*;

impl Model {
    /// A journal write alone, pinning the journal to `version`.
    pub fn journal_write(
        &mut self,
        id: &str,
        lease: i64,
        version: u32,
        write: &JournalWrite,
        now: Millis,
    ) -> Result<Result<(), Refusal>, Hole> {
        if let Err(refusal) = self.lease_check(id, lease) {
            return Ok(Err(refusal));
        }
        let task = self.tasks.get_mut(id).unwrap();
        if write.from as usize > task.journal.len() {
            return Err(Hole);
        }
        apply(task, Operation::Journal, now, 0);
        task.journal.truncate(write.from as usize);
        task.journal.extend(write.entries.iter().cloned());
        task.journal_version = (!task.journal.is_empty()).then_some(version);
        Ok(Ok(()))
    }

    /// A journal write alone, as a message numbered `after` among its
    /// lease's (`None`: from an executor of an earlier release, taken in
    /// any turn): taken in its turn only, and the copy of the message taken
    /// last answered as written without a change.
    pub fn journal_message(
        &mut self,
        id: &str,
        lease: i64,
        version: u32,
        write: &JournalWrite,
        after: Option<u32>,
        now: Millis,
    ) -> Result<Result<(), Refusal>, Unwritten> {
        if let Err(refusal) = self.lease_check(id, lease) {
            return Ok(Err(refusal));
        }
        if let Some(after) = after {
            let taken = self.tasks[id].journal_taken;
            if taken == after + 1 {
                return Ok(Ok(()));
            }
            if taken != after {
                return Err(Unwritten::OutOfTurn);
            }
        }
        let written = self
            .journal_write(id, lease, version, write, now)
            .map_err(|Hole| Unwritten::Hole)?;
        if after.is_some() {
            self.tasks.get_mut(id).unwrap().journal_taken += 1;
        }
        Ok(written)
    }

    /// The ids of task `id`'s children.
    pub fn children(&self, id: &str) -> Vec<String> {
        self.tasks
            .iter()
            .filter(|(_, t)| t.parent.as_deref() == Some(id))
            .map(|(child, _)| child.clone())
            .collect()
    }

    /// After an operation that may have ended tasks: each task suspended
    /// waiting for its children forgets those that ended, and is woken by
    /// the end of the last it waited for.
    pub(super) fn gather(&mut self, now: Millis) {
        let ended: Vec<String> = self
            .tasks
            .iter()
            .filter(|(_, t)| t.status.is_terminal())
            .map(|(id, _)| id.clone())
            .collect();
        for task in self.tasks.values_mut() {
            if task.status != TaskStatus::Suspended || !task.waiting_for_children {
                continue;
            }
            let before = task.awaiting.len();
            task.awaiting.retain(|child| !ended.contains(child));
            if task.awaiting.len() < before && task.awaiting.is_empty() {
                apply(task, Operation::Gather, now, 0);
            }
        }
    }

    /// Keeps a signal for a task that has not ended; wakes it when it is
    /// suspended waiting for one of that name.
    pub fn signal(&mut self, id: &str, name: &str, now: Millis) -> SignalAnswer {
        let Some(task) = self.tasks.get_mut(id) else {
            return SignalAnswer::NotFound;
        };
        if task.status.is_terminal() {
            return SignalAnswer::AlreadyEnded(task.status);
        }
        let seq = task.signals.len() as u32;
        task.signals.push(name.to_owned());
        let woke =
            task.status == TaskStatus::Suspended && task.waiting_for.as_deref() == Some(name);
        if woke {
            apply(task, Operation::Signal, now, 0);
        }
        SignalAnswer::Sent { seq, woke }
    }
}
