//! `waft task journal ID`: a durable task's journal for a person — every
//! host call its executions made, which attempt made it live and which
//! replayed it, when, and how long it took.
//!
//! The Frontend answers the entries without their answers (they may hold
//! response bodies; `--json` asks for them, see `journal_file`) and the
//! attempts with how many entries each replayed;
//! an entry was made live by its `attempt`, and attempt `a` replayed it
//! when `a.replayed > entry.seq`.

use waft_store::{Attempt, JournalEntry};

use crate::commands::client::time;

/// How one entry was used: the attempt that made it live, and those that
/// replayed it, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Use {
    pub(crate) live: u32,
    pub(crate) replayed: Vec<u32>,
}

impl Use {
    /// `entry`'s use among `attempts` (the task's ended executions).
    pub(crate) fn of(entry: &JournalEntry, attempts: &[Attempt]) -> Self {
        Self {
            live: entry.attempt,
            replayed: attempts
                .iter()
                .filter(|attempt| attempt.replayed > entry.seq)
                .map(|attempt| attempt.attempt)
                .collect(),
        }
    }

    /// `live #1`, `live #1, replayed #2 #3`.
    fn text(&self) -> String {
        let mut text = format!("live #{}", self.live);
        if !self.replayed.is_empty() {
            text.push_str(", replayed");
            for attempt in &self.replayed {
                text.push_str(&format!(" #{attempt}"));
            }
        }
        text
    }
}

/// The widest a summary is shown in the table; `--json` has it whole.
const SUMMARY_WIDTH: usize = 60;

/// The journal as a table: seq, call, summary, live or replayed, at, took.
pub(crate) fn table(entries: &[JournalEntry], attempts: &[Attempt]) -> String {
    let rows: Vec<[String; 6]> = entries
        .iter()
        .map(|entry| {
            [
                entry.seq.to_string(),
                printable(&entry.call),
                cut(&printable(&entry.summary), SUMMARY_WIDTH),
                Use::of(entry, attempts).text(),
                time(entry.at),
                took(entry.took_us),
            ]
        })
        .collect();
    let header = ["SEQ", "CALL", "SUMMARY", "LIVE/REPLAYED", "AT", "TOOK"].map(str::to_owned);
    let mut widths = header.clone().map(|h| h.chars().count());
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut text = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (i, (cell, width)) in row.iter().zip(widths).enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(cell);
                let pad = width - cell.chars().count();
                line.push_str(&" ".repeat(pad + 2));
            }
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

/// A call's duration for a person: `850µs`, `12.3ms`, `4.56s`.
fn took(micros: u64) -> String {
    match micros {
        0..1_000 => format!("{micros}µs"),
        1_000..1_000_000 => format!("{:.1}ms", micros as f64 / 1e3),
        _ => format!("{:.2}s", micros as f64 / 1e6),
    }
}

/// `text` on one line of a terminal: control characters (a NUL, a newline)
/// escaped.
fn printable(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect()
}

/// `text` in at most `max` characters, the cut marked with `…`.
fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use waft_store::AttemptOutcome;

    use super::*;

    fn entry(seq: u32, attempt: u32, call: &str, summary: &str) -> JournalEntry {
        JournalEntry {
            seq,
            call: call.into(),
            digest: Vec::new(),
            answer: Vec::new(),
            summary: summary.into(),
            outside: call.contains("http"),
            attempt,
            at: 1_800_000_000_000 + i64::from(seq),
            took_us: 1_500,
        }
    }

    fn attempt(attempt: u32, replayed: u32) -> Attempt {
        Attempt {
            attempt,
            lease_token: i64::from(attempt),
            outcome: AttemptOutcome::Retriable,
            error: None,
            log: None,
            started_at: None,
            ended_at: 0,
            replayed,
        }
    }

    /// Attempt 1 made entries 0–2 live and crashed; attempt 2 replayed
    /// them and made entry 3 live; attempt 3 replayed all four.
    fn history() -> (Vec<JournalEntry>, Vec<Attempt>) {
        let entries = vec![
            entry(0, 1, "wasi:clocks/wall-clock.now", "2027-01-15T08:00:00Z"),
            entry(
                1,
                1,
                "wasi:http/outgoing-handler.handle",
                "POST https://pay.example/charge → 201",
            ),
            entry(2, 1, "wasi:random/random.get-random-u64", "0x5eed"),
            entry(3, 2, "waft:lambda/children.schedule", "receipt → 01J0CHILD"),
        ];
        let attempts = vec![attempt(1, 0), attempt(2, 3), attempt(3, 4)];
        (entries, attempts)
    }

    #[test]
    fn each_entry_says_which_attempt_made_it_live_and_which_replayed_it() {
        let (entries, attempts) = history();
        let uses: Vec<Use> = entries.iter().map(|e| Use::of(e, &attempts)).collect();
        assert_eq!(
            uses,
            [
                Use {
                    live: 1,
                    replayed: vec![2, 3]
                },
                Use {
                    live: 1,
                    replayed: vec![2, 3]
                },
                Use {
                    live: 1,
                    replayed: vec![2, 3]
                },
                Use {
                    live: 2,
                    replayed: vec![3]
                },
            ]
        );
    }

    #[test]
    fn the_table_has_a_row_an_entry_in_aligned_columns() {
        let (entries, attempts) = history();
        let table = table(&entries, &attempts);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 5, "{table}");
        assert!(lines[0].starts_with("SEQ  CALL"), "{table}");
        // Where a column starts, in characters (summaries hold `→`).
        let column =
            |line: &str, needle: &str| line.find(needle).map(|b| line[..b].chars().count());
        let live = column(lines[0], "LIVE/REPLAYED");
        for line in &lines[1..] {
            assert_eq!(column(line, "live #"), live, "{table}");
        }
        assert!(lines[2].contains("live #1, replayed #2 #3"), "{table}");
        assert!(lines[4].contains("live #2, replayed #3"), "{table}");
        assert!(lines[1].ends_with("1.5ms"), "{table}");
    }

    #[test]
    fn odd_summaries_stay_on_one_line_and_within_their_column() {
        let long = "x".repeat(500);
        let entries = vec![
            entry(0, 1, "wasi:config/store.get", "API_URL = a\nb\0c"),
            entry(1, 1, "wasi:config/store.get", &long),
        ];
        let table = table(&entries, &[]);
        assert_eq!(table.lines().count(), 3, "{table}");
        assert!(table.contains(r"a\nb\u{0}c"), "{table}");
        assert!(table.contains(&format!("{}…", "x".repeat(SUMMARY_WIDTH - 1))));
        assert!(!table.contains(&"x".repeat(SUMMARY_WIDTH + 1)));
    }

    #[test]
    fn durations_read_at_a_glance() {
        assert_eq!(took(0), "0µs");
        assert_eq!(took(999), "999µs");
        assert_eq!(took(12_345), "12.3ms");
        assert_eq!(took(4_560_000), "4.56s");
    }
}
