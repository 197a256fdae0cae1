//! Masking a lambda's secret values in its journal's answers.
//!
//! A journal's answer may hold a secret's value: a server that echoed one
//! the lambda sent it. Where a person or a local replay reads answers
//! (`waft task journal --json`), each occurrence is overwritten with as
//! many `*` bytes: the same length, so the encoding around it (length
//! prefixes) still reads, and text around it stays UTF-8 (a whole UTF-8
//! value replaced by ASCII).
//!
//! An owner chooses both the values (as many as it sets, up to 64 KiB
//! each) and, through the servers its lambda calls, the answers; so the
//! search is one pass over the answer for all values at once, an
//! Aho–Corasick automaton, whatever the two hold: linear in the answer's
//! bytes. Every byte of every occurrence is masked, occurrences that
//! overlap one another included (`tok-AAAA` and `AAAA-tail` in
//! `tok-AAAA-tail`), so no part of a value shows beside another. The
//! benchmark `cargo bench -p waft-services --bench masking` measures the
//! worst case.

use std::collections::{HashMap, VecDeque};

use aho_corasick::automaton::Automaton;
use aho_corasick::nfa::contiguous::NFA;
use aho_corasick::{Anchored, MatchKind};

/// Values shorter than this are not masked (as the runtime redacts): they
/// would blank out ordinary bytes, and a secret that short guards nothing.
pub const MIN_LEN: usize = 4;

/// The secret values of one lambda, ready to mask answers with.
pub struct Masker {
    /// Every occurrence of every value, overlapping ones included; `None`
    /// when no value is long enough to mask.
    automaton: Option<NFA>,
}

impl Masker {
    /// A masker of `values`; those under [`MIN_LEN`] bytes are left out.
    /// Building it takes time linear in the values' bytes.
    pub fn new(values: &[String]) -> Self {
        let values: Vec<&[u8]> = values
            .iter()
            .map(String::as_bytes)
            .filter(|value| value.len() >= MIN_LEN)
            .collect();
        let automaton = (!values.is_empty())
            .then(|| {
                NFA::builder()
                    .match_kind(MatchKind::Standard)
                    .build(&values)
                    .inspect_err(|error| {
                        tracing::error!(%error, "cannot build the secrets' masker");
                    })
                    .ok()
            })
            .flatten();
        Self { automaton }
    }

    /// `answer` with every byte of every occurrence of a value overwritten
    /// with `*`.
    pub fn masked(&self, mut answer: Vec<u8>) -> Vec<u8> {
        let Some(nfa) = &self.automaton else {
            return answer;
        };
        let Ok(mut state) = nfa.start_state(Anchored::No) else {
            return answer;
        };
        // The longest value ending in each match state: occurrences ending
        // at one place all lie within the longest, so it alone is masked.
        let mut longest: HashMap<usize, usize> = HashMap::new();
        let mut runs = Runs::default();
        for end in 1..=answer.len() {
            state = nfa.next_state(Anchored::No, state, answer[end - 1]);
            if !nfa.is_match(state) {
                continue;
            }
            let len = *longest.entry(state.as_usize()).or_insert_with(|| {
                (0..nfa.match_len(state))
                    .map(|index| nfa.pattern_len(nfa.match_pattern(state, index)))
                    .max()
                    .unwrap_or(0)
            });
            // The bytes just read are not read again: masking them in
            // place leaves the search as it was.
            runs.mask(&mut answer, end - len, end, nfa.max_pattern_len());
        }
        answer
    }
}

/// The stretches of an answer masked so far, disjoint and in order: an
/// occurrence is masked where no earlier one was, so each byte is written
/// once however many occurrences hold it.
#[derive(Default)]
struct Runs(VecDeque<(usize, usize)>);

impl Runs {
    /// Masks `answer[start..end]`, `end` past every earlier occurrence's,
    /// and forgets the stretches no later occurrence (at most `longest`
    /// bytes) can reach.
    fn mask(&mut self, answer: &mut [u8], start: usize, end: usize, longest: usize) {
        let mut low = start;
        // The end of the unmasked gap being filled, right to left.
        let mut gap_end = end;
        while let Some(&(run_start, run_end)) = self.0.back() {
            if run_end < start {
                break;
            }
            self.0.pop_back();
            answer[run_end..gap_end].fill(b'*');
            gap_end = run_start;
            low = low.min(run_start);
        }
        if gap_end > start {
            answer[start..gap_end].fill(b'*');
        }
        self.0.push_back((low, end));
        while self
            .0
            .front()
            .is_some_and(|&(_, run_end)| run_end + longest < end)
        {
            self.0.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::Masker;

    fn masked(answer: Vec<u8>, values: &[String]) -> Vec<u8> {
        Masker::new(values).masked(answer)
    }

    fn owned(values: &[&str]) -> Vec<String> {
        values.iter().map(|v| (*v).to_owned()).collect()
    }

    #[test]
    fn secret_values_are_masked_in_place_at_their_length() {
        let mut answer = vec![3, 0xff];
        answer.extend_from_slice("Bearer tök-5be2 and tök-5be2".as_bytes());
        let out = masked(answer.clone(), &owned(&["tök-5be2", "abc"]));
        assert_eq!(out.len(), answer.len());
        assert_eq!(&out[..2], &[3, 0xff]);
        let stars = "*".repeat("tök-5be2".len());
        assert_eq!(
            std::str::from_utf8(&out[2..]).unwrap(),
            format!("Bearer {stars} and {stars}")
        );
        assert_eq!(masked(b"abcabc".to_vec(), &owned(&["abc"])), b"abcabc");
    }

    /// A value that contains another goes whole, whichever is named first.
    #[test]
    fn a_value_holding_another_is_masked_whole() {
        for values in [["abcd", "abcd1234"], ["abcd1234", "abcd"]] {
            let out = masked(b"<abcd1234> <abcd>".to_vec(), &owned(&values));
            assert_eq!(out, b"<********> <****>", "{values:?}");
        }
        let out = masked(
            b"[xy-5678-tail]".to_vec(),
            &owned(&["5678", "xy-5678-tail"]),
        );
        assert_eq!(out, b"[************]");
    }

    /// Occurrences that overlap, of one value or of two, are masked
    /// together: no byte of any occurrence shows.
    #[test]
    fn overlapping_occurrences_are_masked_together() {
        let out = masked(
            b"=tok-AAAA-tail=".to_vec(),
            &owned(&["tok-AAAA", "AAAA-tail"]),
        );
        assert_eq!(out, b"=*************=");
        let out = masked(
            b"=tok-AAAA-tail=".to_vec(),
            &owned(&["AAAA-tail", "tok-AAAA"]),
        );
        assert_eq!(out, b"=*************=");
        let out = masked(b"abcabcabc!".to_vec(), &owned(&["abcabc"]));
        assert_eq!(out, b"*********!");
        // At the answer's edges.
        let out = masked(b"wxyz-1-wxyz".to_vec(), &owned(&["wxyz"]));
        assert_eq!(out, b"****-1-****");
        assert_eq!(masked(Vec::new(), &owned(&["wxyz"])), b"");
        assert_eq!(masked(b"wxy".to_vec(), &owned(&["wxyz"])), b"wxy");
    }

    /// Four values of 64 KiB that almost match everywhere in a 4 MiB answer
    /// (the worst case of a search value by value). How fast it is is
    /// measured by `cargo bench -p waft-services --bench masking`; this only
    /// keeps it from being quadratic again, with a bound far above a
    /// linear search even in a debug build.
    #[test]
    fn the_worst_case_stays_linear() {
        let values: Vec<String> = (0..4)
            .map(|i| format!("{}{i}", "a".repeat((64 << 10) - 1)))
            .collect();
        let mut answer = vec![b'a'; 4 << 20];
        answer.extend_from_slice(values[2].as_bytes());
        let started = Instant::now();
        let out = masked(answer, &values);
        let took = started.elapsed();
        assert!(out.ends_with(&[b'*'; 64 << 10]));
        assert_eq!(out.iter().filter(|&&b| b == b'*').count(), 64 << 10);
        assert!(took < Duration::from_secs(10), "masking took {took:?}");
    }
}
