//! What the Store Consumer's poll does in the model: due tasks enqueued,
//! held, dropped or counted as lost, keys admitted by their places and
//! turns; and the recovery that makes every task in flight due at once.

use super::*;

impl Model {
    pub fn poll(&mut self, now: Millis) -> PollAnswer {
        self.poll_skipping(now, &[])
    }

    /// How many more tasks of a lambda's key may go, `admitted` more of
    /// them going already (in flight and enqueued once the poll is done)
    /// and the tasks `decided` leaving the count of those given a slot; and
    /// whether fairness rather than the concurrency leaves none. A key
    /// keeps at most its concurrency in flight, and, when its lambda is
    /// fair, at most its lookahead enqueued or waiting for its rate's slot.
    pub(super) fn places(
        &self,
        lambda: &str,
        key: &str,
        admitted: usize,
        decided: &BTreeSet<String>,
    ) -> (i64, bool) {
        let of_key = || {
            self.tasks
                .iter()
                .filter(|(_, t)| t.lambda == lambda && t.key.as_deref() == Some(key))
        };
        let admitted = admitted as i64;
        let flying = of_key()
            .filter(|(_, t)| machine::IN_FLIGHT.contains(t.status))
            .count() as i64
            + admitted;
        let mut places = (i64::MAX, false);
        if let Some(fairness) = key_fairness(lambda) {
            let queued = of_key()
                .filter(|(_, t)| t.status == TaskStatus::Enqueued)
                .count() as i64
                + admitted;
            let slotted = of_key()
                .filter(|(id, t)| t.key_paced && !t.parked && !decided.contains(*id))
                .filter(|(_, t)| matches!(t.status, TaskStatus::New | TaskStatus::RetriableFailure))
                .count() as i64;
            places = (i64::from(fairness.lookahead(key)) - queued - slotted, true);
        }
        if let Some(limit) = key_limit(lambda) {
            let left = i64::from(limit) - flying;
            if left <= places.0 {
                places = (left, false);
            }
        }
        places
    }

    /// Whether a lambda's keyed tasks wait for places: it has a
    /// concurrency per key or fairness.
    pub(super) fn limited(lambda: &str) -> bool {
        key_limit(lambda).is_some() || key_fairness(lambda).is_some()
    }

    /// Before a poll reads its due tasks: every key with parked tasks has
    /// as many of them unparked, oldest due first (ties by id), as it has
    /// places (all of them when its lambda has no limit).
    pub(super) fn unpark(&mut self, now: Millis) {
        let mut parked: BTreeMap<(String, String), Vec<(Millis, String)>> = BTreeMap::new();
        for (id, task) in &self.tasks {
            if task.parked {
                let key = (task.lambda.clone(), task.key.clone().unwrap());
                parked
                    .entry(key)
                    .or_default()
                    .push((task.due_at, id.clone()));
            }
        }
        for ((lambda, key), mut waiting) in parked {
            waiting.sort();
            let places = match Self::limited(&lambda) {
                true => self.places(&lambda, &key, 0, &BTreeSet::new()).0.max(0) as usize,
                false => waiting.len(),
            };
            for (_, id) in waiting.into_iter().take(places) {
                apply(self.tasks.get_mut(&id).unwrap(), Operation::Unpark, now, 0);
            }
        }
    }

    /// A poll that leaves tasks `skip` alone, as one racing operations
    /// that hold their rows does.
    pub fn poll_skipping(&mut self, now: Millis, skip: &[String]) -> PollAnswer {
        let mut answer = PollAnswer::default();
        self.unpark(now);
        let due: Vec<String> = self
            .tasks
            .iter()
            .filter(|(id, _)| !skip.contains(id))
            .filter(|(_, t)| t.next_trigger_at.is_some_and(|at| at <= now))
            .map(|(id, _)| id.clone())
            .collect();
        let mut candidates = Vec::new();
        // Tasks that go unless their key's rate has no slot for them: due
        // time, id, and the operation that sends them.
        let mut going = Vec::new();
        for id in due {
            let gate = self.gate_of(&self.tasks[&id]);
            let task = self.tasks.get_mut(&id).unwrap();
            let lapsed = machine::RUNNING.contains(task.status);
            if lapsed {
                task.attempts
                    .push((task.lease_token, task.attempt, AttemptOutcome::Lost, 0));
            }
            let operation = match gate {
                GateState::Dropped => Operation::Drop,
                _ if lapsed && task.attempt >= MAX_ATTEMPTS => Operation::Bury,
                GateState::Paused => Operation::Hold,
                GateState::Open if lapsed => Operation::Expire,
                GateState::Open => Operation::Enqueue,
            };
            let due = task.next_trigger_at.unwrap();
            // A task not in flight waits for its key's place: decided
            // below, once the poll's other changes are made.
            let counted = Self::limited(&task.lambda) && task.key.is_some();
            if operation == Operation::Enqueue
                && counted
                && !machine::IN_FLIGHT.contains(task.status)
            {
                candidates.push((due, id.clone()));
                continue;
            }
            match operation {
                Operation::Enqueue | Operation::Expire => {
                    going.push((due, id.clone(), operation));
                    continue;
                }
                _ => apply(task, operation, now, 0),
            }
            match operation {
                Operation::Drop => answer.dropped += 1,
                Operation::Bury => answer.dead += 1,
                _ => answer.held += 1,
            }
        }
        // In due order, ties by id: a key's task goes while it has places.
        candidates.sort();
        let mut admitted: BTreeMap<(String, String), usize> = BTreeMap::new();
        let mut decided = BTreeSet::new();
        for (due, id) in candidates {
            let task = &self.tasks[&id];
            let key = (task.lambda.clone(), task.key.clone().unwrap());
            decided.insert(id.clone());
            let going_already = admitted.get(&key).copied().unwrap_or(0);
            let (places, turn) = self.places(&key.0, &key.1, going_already, &decided);
            if places > 0 {
                *admitted.entry(key).or_default() += 1;
                going.push((due, id, Operation::Enqueue));
            } else {
                let task = self.tasks.get_mut(&id).unwrap();
                apply(task, Operation::Park, now, 0);
                task.awaits_turn = turn;
                if turn {
                    crate::TURNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                answer.parked += 1;
            }
        }
        // Then, in due order, each takes its key's next slot (unless it
        // has one already): one not yet come makes it wait for it.
        going.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        for (_, id, operation) in going {
            let task = self.tasks.get_mut(&id).unwrap();
            if let (Some(rate), Some(key), false) =
                (key_rate(&task.lambda), &task.key, task.key_paced)
            {
                let earliest = now as f64 - (rate.period_ms() as f64 - rate.interval_ms());
                let next = self
                    .buckets
                    .entry((task.lambda.clone(), key.clone()))
                    .or_insert(earliest);
                let at = next.max(earliest);
                *next = at + rate.interval_ms();
                if at > now as f64 {
                    apply(task, Operation::Pace, now, at.ceil() as Millis - now);
                    answer.key_paced += 1;
                    continue;
                }
            }
            apply(task, operation, now, 0);
            answer.enqueued.push((id.clone(), task.enqueue_token));
        }
        answer.enqueued.sort();
        self.gather(now);
        answer
    }

    /// The process that held the store alone started again: every task in
    /// flight whose trigger is still ahead is due now. Answers how many.
    pub fn recover(&mut self, now: Millis) -> u64 {
        let from = machine::transition(Operation::Recover).from;
        let mut recovered = 0;
        for task in self.tasks.values_mut() {
            if from.contains(task.status) && task.next_trigger_at.is_some_and(|at| at > now) {
                apply(task, Operation::Recover, now, 0);
                recovered += 1;
            }
        }
        recovered
    }
}
