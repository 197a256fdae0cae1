//! What is compared, and when: after every step the backend's tasks, their
//! journals and the gates against the model's, with the state table's
//! invariants checked on the backend's own state; once a sequence is over,
//! the attempt history and the journals as pages and without answers.
//! Apart from `run.rs` because this is the test's oracle: what "the
//! backend follows the model" means, whatever drove the two.

use waft_core::machine;
use waft_store::{JournalEntry, TaskJournalRead};

use crate::reference::MAX_ATTEMPTS;
use crate::run::Run;

/// Longer than any journal a sequence writes.
const WHOLE: u32 = 1000;

impl Run<'_> {
    /// Compares the backend's tasks with the model's and checks the state
    /// table's invariants on the backend's own state.
    pub async fn compare(&self, context: &str) {
        self.check_invariants().await;
        if let Some(difference) = self.difference().await {
            panic!("diverged from the model {context}: {difference}");
        }
    }

    /// How the backend's tasks and gates differ from the model's, if they do.
    pub async fn difference(&self) -> Option<String> {
        for (id, expected) in &self.model.tasks {
            let task = self.store.task_get(id).await.unwrap().unwrap();
            let seen = (
                task.status,
                task.held,
                task.parked,
                task.awaits_turn,
                task.debounced,
                task.key_paced,
                task.next_trigger_at,
                task.attempt,
                task.enqueue_token,
                waft_store::lease_counter(task.lease_token),
                task.waiting_for_signal.clone(),
                task.waiting_for_children,
            );
            let suspended = expected.status == waft_core::TaskStatus::Suspended;
            let waiting = suspended.then(|| expected.waiting_for.clone()).flatten();
            let wanted = (
                expected.status,
                expected.held,
                expected.parked,
                expected.awaits_turn,
                expected.debounced,
                expected.key_paced,
                expected.next_trigger_at,
                expected.attempt,
                expected.enqueue_token,
                expected.lease_token,
                waiting,
                suspended && expected.waiting_for_children,
            );
            if seen != wanted {
                return Some(format!("task {id}: {seen:?}, the model {wanted:?}"));
            }
            let journal = self.journal(id, 0, WHOLE, false).await;
            if journal != expected.journal {
                return Some(format!(
                    "journal of {id}: {journal:?}, the model {:?}",
                    expected.journal
                ));
            }
        }
        let gates: Vec<_> = self
            .store
            .gate_list()
            .await
            .unwrap()
            .into_iter()
            .map(|g| ((g.lambda, g.collection.unwrap_or_default()), g.state))
            .collect();
        let wanted: Vec<_> = self
            .model
            .gates
            .iter()
            .map(|(key, state)| (key.clone(), *state))
            .collect();
        (gates != wanted).then(|| format!("gates {gates:?}, the model {wanted:?}"))
    }

    /// The state table's invariants, on the backend's own state.
    async fn check_invariants(&self) {
        let gates = self.store.gate_list().await.unwrap();
        for id in self.model.tasks.keys() {
            let task = self.store.task_get(id).await.unwrap().unwrap();
            if task.status.is_terminal() {
                assert!(task.next_trigger_at.is_none() && !task.held, "{task:?}");
            } else if task.parked {
                assert!(task.next_trigger_at.is_none() && !task.held, "{task:?}");
                assert_eq!(task.status, machine::next_attempt(task.attempt));
                assert!(task.key.is_some(), "parked with no key: {task:?}");
            } else if task.held {
                assert!(task.next_trigger_at.is_none());
                assert_eq!(task.status, machine::next_attempt(task.attempt));
                assert!(
                    gates.iter().any(|g| g.lambda == task.lambda
                        && g.collection.as_ref().is_none_or(|c| *c == task.collection)),
                    "held with no gate: {task:?}"
                );
            } else {
                assert!(task.next_trigger_at.is_some(), "forgotten: {task:?}");
            }
            assert!(task.attempt <= MAX_ATTEMPTS);
        }
    }

    /// A page of a task's journal.
    async fn journal(&self, id: &str, from: u32, limit: u32, bare: bool) -> Vec<JournalEntry> {
        self.store
            .task_journal(TaskJournalRead {
                id: id.to_owned(),
                from,
                limit,
                without_answers: bare,
            })
            .await
            .unwrap()
    }

    /// The ended executions, and the journals read as a person's view
    /// does (without answers, a page from the second entry), compared once
    /// a sequence is over.
    pub async fn compare_history(&self) {
        for (id, expected) in &self.model.tasks {
            let attempts: Vec<_> = self
                .store
                .attempt_list(id)
                .await
                .unwrap()
                .into_iter()
                .map(|a| {
                    (
                        waft_store::lease_counter(a.lease_token),
                        a.attempt,
                        a.outcome,
                        a.replayed,
                    )
                })
                .collect();
            assert_eq!(attempts, expected.attempts, "history of {id}");
            let bare: Vec<_> = expected
                .journal
                .iter()
                .skip(1)
                .take(2)
                .map(|entry| JournalEntry {
                    answer: Vec::new(),
                    ..entry.clone()
                })
                .collect();
            assert_eq!(self.journal(id, 1, 2, true).await, bare, "journal of {id}");
        }
    }
}
