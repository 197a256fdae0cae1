//! A generated case: the program the `script` lambda runs, how the server
//! answers each of its requests, where executions are killed, and whether
//! the task, once dead, is redriven afresh.

use std::collections::BTreeMap;
use std::fmt;

use proptest::prelude::*;
use serde_json::{Value, json};

/// A step of the program (see the `script` sample).
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Post(String),
    /// Requests in flight at once, read in this order.
    Group(Vec<String>),
    Clock,
    Random,
    Heartbeat(u32),
    Child,
    WaitChildren,
    SleepMs(u64),
    /// Traps on this attempt.
    Crash(u32),
    /// Gives up on attempts up to `through`, or when a request failed.
    GiveUp {
        through: u32,
        if_failed: bool,
        fatal: bool,
    },
}

/// How the server answers one receipt of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Ok,
    NotFound,
    TooMany,
    Unavailable,
    /// Closes the connection without an answer.
    HangUp,
}

impl Kind {
    /// The status the lambda sees; `None` for no answer.
    pub fn status(self) -> Option<u16> {
        match self {
            Kind::Ok => Some(200),
            Kind::NotFound => Some(404),
            Kind::TooMany => Some(429),
            Kind::Unavailable => Some(503),
            Kind::HangUp => None,
        }
    }
}

/// Whether a request that got `status` failed: no answer, a 429 or a 5xx.
pub fn failed(status: Option<u16>) -> bool {
    status.is_none_or(|s| s == 429 || s >= 500)
}

/// Where an execution of the task (counted from 0, in claim order) dies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Its lease is lost the moment the server receives `tag` (before it
    /// answers): the answer reaches the executor, which cannot write it.
    OnRequest(String),
    /// Its lease is lost once its `n`th journal write (a part of a split
    /// write counts alone) is in the store.
    AfterWrite(u32),
    /// Once its `n`th write is in the store, the write before it reaches
    /// the store again, late (a retried message), and the lease is lost.
    Redeliver(u32),
}

/// One generated case.
#[derive(Clone)]
pub struct Case {
    pub steps: Vec<Step>,
    /// Per tag, the answer to each receipt in turn; a 200 past the end.
    pub replies: BTreeMap<String, Vec<Kind>>,
    /// Per tag, how long the server waits before answering.
    pub delays: BTreeMap<String, u64>,
    /// Tags answered with a body of [`BIG`] bytes.
    pub big: Vec<String>,
    /// Per execution of the parent (from 0).
    pub faults: BTreeMap<usize, Fault>,
    /// Redrive the task afresh once it is dead.
    pub redrive: bool,
}

/// Bytes of a big answer: two make a journal write over the per-message
/// bound, which then goes as consecutive writes.
pub const BIG: usize = 9 << 20;

impl fmt::Debug for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "steps: {:?}", self.steps)?;
        writeln!(f, "replies: {:?}", self.replies)?;
        writeln!(f, "delays (ms): {:?}; big: {:?}", self.delays, self.big)?;
        writeln!(f, "faults by execution: {:?}", self.faults)?;
        write!(f, "fresh redrive once dead: {}", self.redrive)
    }
}

impl Case {
    /// The reply to receipt `n` (from 0) of `tag`.
    pub fn reply(&self, tag: &str, n: u32) -> Kind {
        self.replies
            .get(tag)
            .and_then(|r| r.get(n as usize))
            .copied()
            .unwrap_or(Kind::Ok)
    }

    /// The requests' tags in call order: a tag's place is its rank among
    /// the execution's requests (its idempotency key's number).
    pub fn tags(&self) -> Vec<String> {
        self.steps
            .iter()
            .flat_map(|step| match step {
                Step::Post(tag) => vec![tag.clone()],
                Step::Group(tags) => tags.clone(),
                _ => Vec::new(),
            })
            .collect()
    }

    /// The payload the `script` lambda runs.
    pub fn payload(&self, url: &str) -> Vec<u8> {
        let steps: Vec<Value> = self
            .steps
            .iter()
            .map(|step| match step {
                Step::Post(tag) => json!({"post": tag}),
                Step::Group(tags) => json!({"group": tags}),
                Step::Clock => json!("clock"),
                Step::Random => json!("random"),
                Step::Heartbeat(n) => json!({"heartbeat": n}),
                Step::Child => json!("child"),
                Step::WaitChildren => json!("wait_children"),
                Step::SleepMs(ms) => json!({"sleep_ms": ms}),
                Step::Crash(k) => json!({"crash": k}),
                Step::GiveUp {
                    through,
                    if_failed,
                    fatal,
                } => json!({"give_up": {"through": through, "if_failed": if_failed,
                           "fatal": fatal}}),
            })
            .collect();
        serde_json::to_vec(&json!({"url": url, "steps": steps})).expect("JSON")
    }
}

/// A step before tags are given out: requests are numbered afterwards.
#[derive(Debug, Clone)]
enum Raw {
    Post,
    Group(usize),
    Other(Step),
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        5 => Just(Kind::Ok),
        1 => Just(Kind::NotFound),
        1 => Just(Kind::TooMany),
        2 => Just(Kind::Unavailable),
        1 => Just(Kind::HangUp),
    ]
}

fn raw_step() -> impl Strategy<Value = Raw> {
    prop_oneof![
        4 => Just(Raw::Post),
        2 => (2usize..=3).prop_map(Raw::Group),
        1 => Just(Raw::Other(Step::Clock)),
        1 => Just(Raw::Other(Step::Random)),
        1 => (1u32..=4).prop_map(|n| Raw::Other(Step::Heartbeat(n))),
        2 => Just(Raw::Other(Step::Child)),
        1 => Just(Raw::Other(Step::WaitChildren)),
        1 => (5u64..=60).prop_map(|ms| Raw::Other(Step::SleepMs(ms))),
        1 => (1u32..=2).prop_map(|k| Raw::Other(Step::Crash(k))),
        2 => (0u32..=1, any::<bool>(), prop::bool::weighted(0.15)).prop_map(
            |(through, if_failed, fatal)| Raw::Other(Step::GiveUp { through, if_failed, fatal })
        ),
    ]
}

/// A shape the case starts with, besides random steps: each puts the
/// journal where one of its rules is easiest to break.
#[derive(Debug, Clone, Copy)]
enum Opening {
    None,
    /// Two requests at once, the first slower and failing, then a give-up.
    FailedInAGroup,
    /// Two big answers at once, the first slower: its write is split.
    BigGroup,
    /// Requests one after the other, the second write delivered twice.
    Sequence,
    /// A child, then giving up on every attempt: the task dies.
    Doomed,
}

fn fault(tags: usize) -> impl Strategy<Value = Fault> {
    prop_oneof![
        (0..tags.max(1)).prop_map(|n| Fault::OnRequest(format!("t{n}"))),
        (1u32..=3).prop_map(Fault::AfterWrite),
        (2u32..=3).prop_map(Fault::Redeliver),
    ]
}

/// Cases of up to `max_steps` random steps after their opening.
pub fn cases(max_steps: usize) -> impl Strategy<Value = Case> {
    let opening = prop_oneof![
        2 => Just(Opening::None),
        1 => Just(Opening::FailedInAGroup),
        1 => Just(Opening::BigGroup),
        1 => Just(Opening::Sequence),
        1 => Just(Opening::Doomed),
    ];
    (
        opening,
        prop::collection::vec(raw_step(), 0..=max_steps),
        prop::collection::vec(prop::collection::vec(kind(), 0..=2), 12),
        prop::collection::vec(0u64..=2, 12),
        prop::collection::btree_map(0usize..3, fault(12), 0..=2),
        any::<bool>(),
    )
        .prop_map(|(opening, raw, replies, delays, faults, redrive)| {
            build(opening, raw, replies, delays, faults, redrive)
        })
}

fn build(
    opening: Opening,
    raw: Vec<Raw>,
    replies: Vec<Vec<Kind>>,
    delays: Vec<u64>,
    mut faults: BTreeMap<usize, Fault>,
    redrive: bool,
) -> Case {
    let mut next = 0usize;
    let tag = |next: &mut usize| {
        let t = format!("t{next}");
        *next += 1;
        t
    };
    let mut steps = Vec::new();
    let mut replies: BTreeMap<String, Vec<Kind>> = (0..12)
        .map(|n| (format!("t{n}"), replies[n].clone()))
        .collect();
    // Distinct within a group (a step of 250 ms apart), so that which of
    // its requests finished last is known.
    let mut delays: BTreeMap<String, u64> = (0..12)
        .map(|n| (format!("t{n}"), delays[n] * 250))
        .collect();
    let mut big = Vec::new();
    match opening {
        Opening::None => {}
        Opening::FailedInAGroup => {
            let (a, b) = (tag(&mut next), tag(&mut next));
            replies.insert(a.clone(), vec![Kind::Unavailable]);
            replies.insert(b.clone(), vec![Kind::Ok]);
            delays.insert(a.clone(), 400);
            delays.insert(b.clone(), 0);
            steps.push(Step::Group(vec![a, b]));
            steps.push(Step::GiveUp {
                through: 0,
                if_failed: true,
                fatal: false,
            });
        }
        Opening::BigGroup => {
            let (a, b) = (tag(&mut next), tag(&mut next));
            replies.insert(a.clone(), vec![Kind::Ok]);
            replies.insert(b.clone(), vec![Kind::Ok]);
            delays.insert(a.clone(), 500);
            delays.insert(b.clone(), 0);
            big = vec![a.clone(), b.clone()];
            steps.push(Step::Group(vec![a, b]));
            faults.entry(0).or_insert(Fault::AfterWrite(2));
        }
        Opening::Sequence => {
            for _ in 0..3 {
                let t = tag(&mut next);
                replies.insert(t.clone(), vec![Kind::Ok]);
                steps.push(Step::Post(t));
            }
            faults.entry(0).or_insert(Fault::Redeliver(2));
        }
        Opening::Doomed => {}
    }
    for step in raw {
        match step {
            Raw::Post => steps.push(Step::Post(tag(&mut next))),
            Raw::Group(n) => {
                let tags: Vec<String> = (0..n).map(|_| tag(&mut next)).collect();
                for (i, t) in tags.iter().enumerate() {
                    // Last in the group answers first, 250 ms apart.
                    delays.insert(t.clone(), 250 * (n - 1 - i) as u64);
                }
                steps.push(Step::Group(tags));
            }
            Raw::Other(step) => steps.push(step),
        }
        if next >= 10 {
            break;
        }
    }
    if let Opening::Doomed = opening {
        steps.push(Step::Child);
        steps.push(Step::GiveUp {
            through: 9,
            if_failed: false,
            fatal: false,
        });
    }
    replies.retain(|t, _| t[1..].parse::<usize>().is_ok_and(|n| n < next));
    delays.retain(|t, _| t[1..].parse::<usize>().is_ok_and(|n| n < next));
    Case {
        steps,
        replies,
        delays,
        big,
        faults,
        redrive,
    }
}
