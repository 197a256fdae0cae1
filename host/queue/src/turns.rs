//! Weighted turns between keys: the order in which the in-process queue
//! and a Controller's buffers hand out the messages of a fair lambda (a
//! deficit round-robin). A key's next message waits behind at most one
//! turn of every other key with messages, however many another key has;
//! messages without a turn take turns as one key, so a lambda that is not
//! fair is served first in, first out.

use std::collections::{HashMap, VecDeque};

use crate::{Delivery, QueueMessage, Turn};

/// What takes turns: a message, or a received one.
pub trait Turned {
    /// The key whose turns it takes, if any.
    fn turn(&self) -> Option<&Turn>;
}

impl Turned for QueueMessage {
    fn turn(&self) -> Option<&Turn> {
        self.turn.as_ref()
    }
}

impl Turned for Delivery {
    fn turn(&self) -> Option<&Turn> {
        self.message.turn.as_ref()
    }
}

/// Items waiting, in weighted turns between their keys.
#[derive(Debug)]
pub struct Turns<T> {
    by_key: HashMap<String, VecDeque<T>>,
    /// The keys with items, the one whose turn it is first.
    order: VecDeque<String>,
    /// Items handed out in the current turn.
    served: u32,
    len: usize,
}

impl<T> Default for Turns<T> {
    fn default() -> Self {
        Self {
            by_key: HashMap::new(),
            order: VecDeque::new(),
            served: 0,
            len: 0,
        }
    }
}

impl<T: Turned> Turns<T> {
    /// Puts an item last in its key's line.
    pub fn push(&mut self, item: T) {
        let key = item.turn().map_or("", |turn| turn.key.as_str());
        let waiting = match self.by_key.get_mut(key) {
            Some(waiting) => waiting,
            None => {
                let key = key.to_owned();
                self.order.push_back(key.clone());
                self.by_key.entry(key).or_default()
            }
        };
        waiting.push_back(item);
        self.len += 1;
    }

    /// The next item: the current key's, which keeps the turn for as many
    /// items as it weighs.
    pub fn pop(&mut self) -> Option<T> {
        let key = self.order.front()?;
        let waiting = self.by_key.get_mut(key)?;
        let item = waiting.pop_front()?;
        self.len -= 1;
        self.served += 1;
        let weight = item.turn().map_or(1, |turn| turn.weight.max(1));
        if waiting.is_empty() {
            self.by_key.remove(key);
            self.order.pop_front();
            self.served = 0;
        } else if self.served >= weight {
            self.order.rotate_left(1);
            self.served = 0;
        }
        Some(item)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<T: Turned> Extend<T> for Turns<T> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, items: I) {
        for item in items {
            self.push(item);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn message(id: &str, turn: Option<(&str, u32)>) -> QueueMessage {
        QueueMessage {
            task_id: id.to_owned(),
            enqueue_token: 1,
            traceparent: None,
            tracestate: None,
            turn: turn.map(|(key, weight)| Turn {
                key: key.to_owned(),
                weight,
            }),
        }
    }

    fn order(turns: &mut Turns<QueueMessage>) -> Vec<String> {
        std::iter::from_fn(|| turns.pop())
            .map(|m| m.task_id)
            .collect()
    }

    #[test]
    fn keys_take_weighted_turns_and_messages_without_one_go_in_order() {
        let mut turns = Turns::default();
        for i in 0..5 {
            turns.push(message(&format!("a{i}"), Some(("a", 1))));
        }
        turns.push(message("b0", Some(("b", 2))));
        turns.push(message("b1", Some(("b", 2))));
        turns.push(message("b2", Some(("b", 2))));
        turns.push(message("n0", None));
        assert_eq!(turns.len(), 9);
        assert_eq!(
            order(&mut turns),
            ["a0", "b0", "b1", "n0", "a1", "b2", "a2", "a3", "a4"]
        );
        assert!(turns.is_empty());

        for i in 0..3 {
            turns.push(message(&format!("n{i}"), None));
        }
        assert_eq!(order(&mut turns), ["n0", "n1", "n2"]);
    }
}
