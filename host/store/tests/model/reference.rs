//! A reference model of the store's state table, in plain Rust: what every
//! `TaskStore` operation the model test drives must answer, and what it must
//! leave behind. It is written from the state table (DESIGN.md and the
//! store's docs), not from the SQL, so the two can disagree.

use std::collections::BTreeMap;

use waft_core::TaskStatus;
use waft_store::{AttemptOutcome, GateState, Millis, Refusal};

pub const ENQUEUE_TIMEOUT: Millis = 5_000;
pub const CLAIM_TIMEOUT: Millis = 3_000;
pub const HEARTBEAT_TIMEOUT: Millis = 2_000;
pub const MAX_ATTEMPTS: u32 = 2;

/// One task as the model sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelTask {
    pub lambda: String,
    pub collection: String,
    pub status: TaskStatus,
    pub held: bool,
    pub next_trigger_at: Option<Millis>,
    pub due_at: Millis,
    pub attempt: u32,
    pub enqueue_token: i64,
    pub lease_token: i64,
    /// Ended executions: lease and outcome.
    pub attempts: Vec<(i64, u32, AttemptOutcome)>,
}

/// The whole model: tasks by id, gates by `(lambda, collection or "")`,
/// periodic schedules' next occurrences.
#[derive(Debug, Clone, Default)]
pub struct Model {
    pub tasks: BTreeMap<String, ModelTask>,
    pub gates: BTreeMap<(String, String), GateState>,
    pub crons: BTreeMap<String, Millis>,
}

/// What the consumer's poll did, as sets.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PollAnswer {
    pub enqueued: Vec<(String, i64)>,
    pub held: u64,
    pub dropped: u64,
    pub dead: u64,
}

/// How a claim was answered: the attempt and lease, or why not.
pub type ClaimAnswer = Result<(u32, i64), Refusal>;

/// How a cancel was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelAnswer {
    Cancelled,
    NotFound,
    AlreadyEnded(TaskStatus),
}

/// How a redrive of one task was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedriveAnswer {
    Redriven,
    NotFound,
    NotDead(TaskStatus),
}

/// How a result was meant to end its execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    Success,
    Fatal,
    /// Retriable, to be tried again after this many milliseconds.
    Retriable(u64),
}

impl Model {
    fn gate_of(&self, task: &ModelTask) -> GateState {
        let mut effect = GateState::Open;
        for key in [
            (task.lambda.clone(), String::new()),
            (task.lambda.clone(), task.collection.clone()),
        ] {
            match self.gates.get(&key) {
                Some(GateState::Dropped) => return GateState::Dropped,
                Some(GateState::Paused) => effect = GateState::Paused,
                _ => {}
            }
        }
        effect
    }

    pub fn insert(&mut self, id: String, lambda: &str, collection: &str, run_at: Millis) {
        self.tasks.insert(
            id,
            ModelTask {
                lambda: lambda.into(),
                collection: collection.into(),
                status: TaskStatus::New,
                held: false,
                next_trigger_at: Some(run_at),
                due_at: run_at,
                attempt: 0,
                enqueue_token: 0,
                lease_token: 0,
                attempts: Vec::new(),
            },
        );
    }

    fn waiting(task: &ModelTask) -> TaskStatus {
        if task.attempt == 0 {
            TaskStatus::New
        } else {
            TaskStatus::RetriableFailure
        }
    }

    fn hold(task: &mut ModelTask) {
        task.status = Self::waiting(task);
        task.held = true;
        if let Some(next) = task.next_trigger_at {
            task.due_at = task.due_at.min(next);
        }
        task.next_trigger_at = None;
        task.enqueue_token += 1;
    }

    fn end(task: &mut ModelTask, status: TaskStatus) {
        task.status = status;
        task.next_trigger_at = None;
        task.held = false;
    }

    pub fn poll(&mut self, now: Millis) -> PollAnswer {
        let mut answer = PollAnswer::default();
        let due: Vec<String> = self
            .tasks
            .iter()
            .filter(|(_, t)| t.next_trigger_at.is_some_and(|at| at <= now))
            .map(|(id, _)| id.clone())
            .collect();
        for id in due {
            let gate = self.gate_of(&self.tasks[&id]);
            let task = self.tasks.get_mut(&id).unwrap();
            let lapsed = matches!(task.status, TaskStatus::Claimed | TaskStatus::Processing);
            if lapsed {
                task.attempts
                    .push((task.lease_token, task.attempt, AttemptOutcome::Lost));
                if task.attempt >= MAX_ATTEMPTS && gate != GateState::Dropped {
                    Self::end(task, TaskStatus::Dead);
                    answer.dead += 1;
                    continue;
                }
            }
            match gate {
                GateState::Dropped => {
                    Self::end(task, TaskStatus::Dropped);
                    answer.dropped += 1;
                }
                GateState::Paused => {
                    Self::hold(task);
                    answer.held += 1;
                }
                GateState::Open => {
                    task.status = TaskStatus::Enqueued;
                    task.enqueue_token += 1;
                    task.next_trigger_at = Some(now + ENQUEUE_TIMEOUT);
                    answer.enqueued.push((id.clone(), task.enqueue_token));
                }
            }
        }
        answer.enqueued.sort();
        answer
    }

    pub fn claim(&mut self, id: &str, token: i64, now: Millis) -> ClaimAnswer {
        let Some(task) = self.tasks.get(id) else {
            return Err(Refusal::NotFound);
        };
        let gate = self.gate_of(task);
        let task = self.tasks.get_mut(id).unwrap();
        if task.status == TaskStatus::Enqueued
            && task.enqueue_token == token
            && !task.held
            && gate == GateState::Open
        {
            task.status = TaskStatus::Claimed;
            task.lease_token += 1;
            task.attempt += 1;
            task.next_trigger_at = Some(now + CLAIM_TIMEOUT);
            return Ok((task.attempt, task.lease_token));
        }
        if task.held {
            return Err(Refusal::Held);
        }
        if task.status != TaskStatus::Enqueued {
            return Err(Refusal::WrongState(task.status));
        }
        match gate {
            GateState::Paused => {
                Self::hold(task);
                Err(Refusal::Held)
            }
            GateState::Dropped => {
                Self::end(task, TaskStatus::Dropped);
                Err(Refusal::WrongState(TaskStatus::Dropped))
            }
            GateState::Open => Err(Refusal::StaleEnqueueToken {
                current: task.enqueue_token,
            }),
        }
    }

    fn lease_check(&self, id: &str, lease: i64) -> Result<(), Refusal> {
        let Some(task) = self.tasks.get(id) else {
            return Err(Refusal::NotFound);
        };
        if task.lease_token != lease {
            return Err(Refusal::StaleLease {
                current: task.lease_token,
            });
        }
        if !matches!(task.status, TaskStatus::Claimed | TaskStatus::Processing) {
            return Err(Refusal::WrongState(task.status));
        }
        Ok(())
    }

    pub fn heartbeat(&mut self, id: &str, lease: i64, now: Millis) -> Result<(), Refusal> {
        self.lease_check(id, lease)?;
        let task = self.tasks.get_mut(id).unwrap();
        task.status = TaskStatus::Processing;
        task.next_trigger_at = Some(now + HEARTBEAT_TIMEOUT);
        Ok(())
    }

    pub fn result(
        &mut self,
        id: &str,
        lease: i64,
        ending: Ending,
        now: Millis,
    ) -> Result<TaskStatus, Refusal> {
        self.lease_check(id, lease)?;
        let task = self.tasks.get_mut(id).unwrap();
        let (status, outcome) = match ending {
            Ending::Success => (TaskStatus::Success, AttemptOutcome::Success),
            Ending::Fatal => (TaskStatus::FatalFailure, AttemptOutcome::Fatal),
            Ending::Retriable(_) if task.attempt >= MAX_ATTEMPTS => {
                (TaskStatus::Dead, AttemptOutcome::Retriable)
            }
            Ending::Retriable(_) => (TaskStatus::RetriableFailure, AttemptOutcome::Retriable),
        };
        task.attempts
            .push((task.lease_token, task.attempt, outcome));
        match (status, ending) {
            (TaskStatus::RetriableFailure, Ending::Retriable(after)) => {
                task.status = status;
                task.held = false;
                let next = now + after as Millis;
                task.next_trigger_at = Some(next);
                task.due_at = next;
            }
            _ => Self::end(task, status),
        }
        Ok(status)
    }

    pub fn cancel(&mut self, id: &str) -> CancelAnswer {
        let Some(task) = self.tasks.get_mut(id) else {
            return CancelAnswer::NotFound;
        };
        if task.status.is_terminal() {
            return CancelAnswer::AlreadyEnded(task.status);
        }
        Self::end(task, TaskStatus::Cancelled);
        CancelAnswer::Cancelled
    }

    pub fn gate_set(
        &mut self,
        lambda: &str,
        collection: Option<&str>,
        state: GateState,
        now: Millis,
    ) -> u64 {
        let key = (lambda.to_owned(), collection.unwrap_or("").to_owned());
        let covered = |task: &ModelTask| {
            task.lambda == lambda && collection.is_none_or(|c| c == task.collection)
        };
        match state {
            GateState::Open => {
                self.gates.remove(&key);
                let mut released = 0;
                let ids: Vec<String> = self.tasks.keys().cloned().collect();
                for id in ids {
                    let gate = self.gate_of(&self.tasks[&id]);
                    let task = self.tasks.get_mut(&id).unwrap();
                    if task.held
                        && covered(task)
                        && !task.status.is_terminal()
                        && gate == GateState::Open
                    {
                        task.held = false;
                        task.next_trigger_at = Some(task.due_at);
                        released += 1;
                    }
                }
                released
            }
            state => {
                self.gates.insert(key, state);
                if state == GateState::Dropped {
                    for task in self.tasks.values_mut() {
                        if task.held && covered(task) && !task.status.is_terminal() {
                            task.held = false;
                            task.next_trigger_at = Some(now);
                        }
                    }
                }
                0
            }
        }
    }

    pub fn redrive(&mut self, id: &str, now: Millis) -> RedriveAnswer {
        let Some(task) = self.tasks.get_mut(id) else {
            return RedriveAnswer::NotFound;
        };
        if task.status != TaskStatus::Dead {
            return RedriveAnswer::NotDead(task.status);
        }
        task.status = TaskStatus::New;
        task.attempt = 0;
        task.due_at = now;
        task.next_trigger_at = Some(now);
        RedriveAnswer::Redriven
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
            self.insert(id, lambda, "default", expected);
        }
        true
    }
}
