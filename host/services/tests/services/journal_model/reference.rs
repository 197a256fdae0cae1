//! The reference model of the durable journal's rules (README, *Durable
//! lambdas*, rules 1–8), for one execution of the `script` lambda: given
//! the program, the journal the execution starts from, what the server
//! answered so far and where the execution dies, which requests the
//! server must and may receive, how the execution ends, what it answers,
//! and what the journal it leaves must still hold.
//!
//! The model speaks of requests by their place among the program's
//! requests (the journal's HTTP entries keep that order, whatever other
//! calls lie between them) and of answers by the receipt they answered
//! (the server numbers each tag's receipts and says which in the body).
//! Where the rules leave a choice — which of several requests in flight a
//! killed execution still wrote, which request of a group finished last
//! when the journal replayed some of it — the model widens what it allows
//! instead of guessing.

use std::collections::{BTreeMap, BTreeSet};

use super::case::{Case, Fault, Step, failed};

/// An HTTP entry of the journal, as read back from the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// A request that never answered: made again, with the same key.
    Hole,
    /// An answer: the receipt it answered, `None` for a failure without
    /// an answer (a hang-up).
    Answered(Option<u32>),
}

/// How an execution ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Success,
    Retriable,
    Fatal,
    Trapped,
    /// Its lease was lost (a fault): nothing it reports counts.
    Killed,
}

/// What the model says of one execution.
#[derive(Debug, Clone)]
pub struct Prediction {
    /// Tags the server must receive.
    pub must: BTreeSet<String>,
    /// Tags the server may receive (`must` included): never a request
    /// whose answer the journal holds.
    pub may: BTreeSet<String>,
    /// How it may end: one end, or that and `Killed` where a fault may or
    /// may not strike before the end.
    pub ends: Vec<End>,
    /// The answers its output shows, when it succeeds.
    pub answers: BTreeMap<String, String>,
    /// Places from which the journal it leaves may lose answers: a
    /// give-up after a failed call cuts the journal before that call.
    pub cut_from: Option<usize>,
    /// The place of a failed call given up after: the journal it leaves
    /// holds no answer there (rule 5: the call is made again).
    pub remade: Option<usize>,
    /// Children reached: at least, at most (a child's rank is its key).
    pub children: (u32, u32),
    /// Receipts of each tag once it is over (what the server counted).
    pub counts: BTreeMap<String, u32>,
}

/// The status as the `script` lambda shows it.
pub fn shown(status: Option<u16>) -> String {
    status.map_or_else(|| "error".to_owned(), |s| s.to_string())
}

/// One execution of attempt `attempt`, starting from the journal's HTTP
/// entries `before`, after the server received each tag `counts` times,
/// dying by `fault` if any.
pub fn predict(
    case: &Case,
    attempt: u32,
    before: &[Held],
    counts: &BTreeMap<String, u32>,
    fault: Option<&Fault>,
) -> Prediction {
    // A kill after the n-th write strikes at a point the model cannot
    // place: every request from the start may or may not go out.
    let blind = matches!(fault, Some(Fault::AfterWrite(_) | Fault::Redeliver(_)));
    let mut p = Prediction {
        must: BTreeSet::new(),
        may: BTreeSet::new(),
        ends: Vec::new(),
        answers: BTreeMap::new(),
        cut_from: None,
        remade: None,
        children: (0, 0),
        counts: counts.clone(),
    };
    let mut place = 0usize;
    let mut failures = false;
    // The last outside call: its place, whether it failed, whether the
    // model knows it was the last to finish.
    let mut last: Option<(Option<usize>, bool, bool)> = None;
    // The first place of the last outside step's failed requests: a
    // give-up after a group of which one failed may cut there, whichever
    // finished last.
    let mut last_failed: Option<usize> = None;
    // Places of this execution's calls that failed.
    let mut failed_places: Vec<usize> = Vec::new();
    let mut children = 0u32;
    let mut end = None;
    'steps: for step in &case.steps {
        match step {
            Step::Post(_) | Step::Group(_) => {
                let tags: Vec<String> = match step {
                    Step::Post(tag) => vec![tag.clone()],
                    Step::Group(tags) => tags.clone(),
                    _ => unreachable!(),
                };
                let group = tags.len() > 1;
                let mut statuses = Vec::new();
                let mut live_all = true;
                let mut replayed_all = true;
                let mut killed = false;
                for tag in &tags {
                    let status = match before.get(place) {
                        Some(Held::Answered(receipt)) => {
                            live_all = false;
                            receipt.and_then(|r| case.reply(tag, r).status())
                        }
                        _ => {
                            replayed_all = false;
                            let receipt = p.counts.entry(tag.clone()).or_insert(0);
                            let status = case.reply(tag, *receipt).status();
                            *receipt += 1;
                            p.may.insert(tag.clone());
                            let kills = fault == Some(&Fault::OnRequest(tag.clone()));
                            // In a group, requests go out together: one
                            // whose answer comes after a kill may be cut
                            // off before it leaves.
                            if !blind && (!group || kills) {
                                p.must.insert(tag.clone());
                            }
                            killed |= kills;
                            status
                        }
                    };
                    statuses.push((place, tag.clone(), status));
                    place += 1;
                }
                if killed {
                    // Its answer (and those of its group) is not written.
                    end = Some(End::Killed);
                    break 'steps;
                }
                last_failed = statuses
                    .iter()
                    .filter(|(_, _, s)| failed(*s))
                    .map(|(at, _, _)| *at)
                    .min();
                for (at, tag, status) in &statuses {
                    failures |= failed(*status);
                    if failed(*status) {
                        failed_places.push(*at);
                    }
                    p.answers.insert(tag.clone(), shown(*status));
                }
                last = Some(if !group {
                    let (at, _, status) = &statuses[0];
                    (Some(*at), failed(*status), true)
                } else if live_all {
                    // The one the server answered last finished last.
                    let delays: Vec<u64> = statuses
                        .iter()
                        .map(|(_, tag, _)| case.delays.get(tag).copied().unwrap_or(0))
                        .collect();
                    let longest = *delays.iter().max().expect("a group has requests");
                    let certain = delays.iter().filter(|d| **d == longest).count() == 1;
                    let (at, _, status) = &statuses[delays
                        .iter()
                        .position(|d| *d == longest)
                        .expect("the longest is one of them")];
                    (Some(*at), failed(*status), certain)
                } else {
                    let _ = replayed_all;
                    let any_failed = statuses.iter().any(|(_, _, s)| failed(*s));
                    (None, any_failed, false)
                });
            }
            Step::Child => {
                children += 1;
                last_failed = None;
                // A child is an outside call too; whether it counts as the
                // last one is left open.
                last = Some((None, false, false));
            }
            Step::Crash(k) if *k == attempt => {
                end = Some(End::Trapped);
                break 'steps;
            }
            Step::GiveUp {
                through,
                if_failed,
                fatal,
            } if attempt <= *through || (*if_failed && failures) => {
                end = Some(if *fatal { End::Fatal } else { End::Retriable });
                match last {
                    Some((Some(at), true, true)) => {
                        p.cut_from = Some(at);
                        p.remade = Some(at);
                    }
                    Some((_, _, true)) | None => p.cut_from = last_failed,
                    Some((_, _, false)) => p.cut_from = failed_places.iter().copied().min(),
                }
                break 'steps;
            }
            _ => {}
        }
    }
    let end = end.unwrap_or(End::Success);
    p.ends = if blind && end != End::Killed {
        vec![end, End::Killed]
    } else {
        vec![end]
    };
    p.children = (if blind { 0 } else { children }, children);
    p
}
