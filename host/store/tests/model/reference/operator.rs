//! What operators and schedules do in the model: gates, redrives, deploys
//! and the occurrences of periodic schedules.

use super::*;

impl Model {
    pub fn gate_set(
        &mut self,
        lambda: &str,
        collection: Option<&str>,
        state: GateState,
        now: Millis,
    ) -> u64 {
        let key = (lambda.to_owned(), collection.unwrap_or("").to_owned());
        let covered = |task: &ModelTask| {
            task.held && task.lambda == lambda && collection.is_none_or(|c| c == task.collection)
        };
        if state == GateState::Open {
            self.gates.remove(&key);
        } else {
            self.gates.insert(key, state);
        }
        let mut released = 0;
        let ids: Vec<String> = self.tasks.keys().cloned().collect();
        for id in ids {
            let gate = self.gate_of(&self.tasks[&id]);
            let task = self.tasks.get_mut(&id).unwrap();
            if !covered(task) {
                continue;
            }
            match (state, gate) {
                (GateState::Open, GateState::Open) => {
                    apply(task, Operation::Release, now, 0);
                    released += 1;
                }
                (GateState::Dropped, _) => apply(task, Operation::ReleaseToDrop, now, 0),
                _ => {}
            }
        }
        released
    }

    /// Redrives a dead task; a fresh redrive discards its journal, and
    /// with it the version the journal pinned, and starts its next
    /// generation.
    pub fn redrive(&mut self, id: &str, fresh: bool, now: Millis) -> RedriveAnswer {
        let Some(task) = self.tasks.get_mut(id) else {
            return RedriveAnswer::NotFound;
        };
        if !machine::transition(Operation::Redrive)
            .from
            .contains(task.status)
        {
            return RedriveAnswer::NotDead(task.status);
        }
        task.due_at = now;
        apply(task, Operation::Redrive, now, 0);
        if fresh {
            task.journal.clear();
            task.journal_version = None;
            task.journal_generation += 1;
            task.signals.clear();
        }
        RedriveAnswer::Redriven
    }

    /// A new version of `lambda`; answers its number.
    /// A new version of `lambda` at `now`: its tasks waiting for a slot of
    /// their key's rate are due by now, and take a slot afresh from full
    /// buckets.
    pub fn deploy(&mut self, lambda: &str, now: Millis) -> u32 {
        self.buckets.retain(|(rated, _), _| rated != lambda);
        for task in self.tasks.values_mut() {
            if task.lambda == lambda && task.key_paced {
                task.key_paced = false;
                task.next_trigger_at = task.next_trigger_at.map(|at| at.min(now));
            }
        }
        let version = self.versions.get_mut(lambda).unwrap();
        *version += 1;
        *version
    }

    /// Materialises the next occurrence of a schedule whose next occurrence
    /// the caller read as `expected`: a task when it is still the next one.
    /// Answers whether a task was created, and moves the schedule on by
    /// `period`.
    pub fn materialize(
        &mut self,
        schedule: &str,
        expected: Millis,
        period: Millis,
        created: Option<String>,
        lambda: &str,
    ) -> bool {
        let next = self.crons.get_mut(schedule).unwrap();
        if *next != expected {
            return false;
        }
        *next = expected + period;
        if let Some(id) = created {
            self.insert(id, lambda, "default", expected, None, None, false, expected);
        }
        true
    }
}
