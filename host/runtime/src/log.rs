//! The task's log: records from the `log` import, stdout and stderr, bounded.
//!
//! A lambda cannot fill the host's memory by logging. Every record is
//! charged to the lambda's `max_log` budget as it enters the host: its text
//! plus a fixed cost for the record and for each of its fields
//! ([`LogRecord::ENTRY_COST`]), which covers what the host holds for it
//! besides its text and the framing a rendering gives its line, so even
//! empty records run the budget out. Past it, records are dropped and only
//! counted: the host holds no more whatever the lambda does, and the task's
//! log says how much was dropped. Logging too much is not a failure of the
//! task.
//!
//! stdout and stderr are cut into lines in one pass over each write: a
//! write costs the host time in proportion to its length, however many
//! lines it holds.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::KillSwitch;
use crate::redact::Redactor;

/// Severity of a record written through the `log` import.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

impl Level {
    /// The level's name in lower case.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Trace => "trace",
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        }
    }
}

/// Where a record came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogSource {
    /// The `log` import, at a level.
    Lambda(Level),
    /// A line the lambda wrote to stdout.
    Stdout,
    /// A line the lambda wrote to stderr (panic messages land here).
    Stderr,
    /// A note of the host's about the execution, such as a request it
    /// refused for want of a grant.
    Waft,
}

impl std::fmt::Display for LogSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LogSource::Lambda(level) => f.write_str(level.as_str()),
            LogSource::Stdout => f.write_str("stdout"),
            LogSource::Stderr => f.write_str("stderr"),
            LogSource::Waft => f.write_str("waft"),
        }
    }
}

/// One record of a task's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    /// Time since the execution started.
    pub at: Duration,
    pub source: LogSource,
    pub message: String,
    /// Structured fields given to the `log` import.
    pub fields: Vec<(String, String)>,
    /// Logged while the execution was still answered from its task's
    /// journal: an earlier attempt logged it too.
    pub replayed: bool,
}

// The sizes [`LogRecord::ENTRY_COST`] is reckoned from.
const _: () = assert!(size_of::<LogRecord>() <= 72);
const _: () = assert!(size_of::<(String, String)>() <= 48);

impl LogRecord {
    /// What a kept record costs of the budget beyond its text, and each of
    /// its fields beyond its key and value: 128 bytes, so an empty record
    /// costs as much as 128 bytes of text.
    ///
    /// It covers what the host holds for an entry besides its text. For a
    /// record, at most 126 bytes: its slot in the list of records (72; the
    /// list never has room for more records than the budget could pay for)
    /// and the allocator's header and rounding of its message and of its
    /// list of fields (up to 31 and 23 bytes). For a field, at most 110: its
    /// two strings (48) and their headers and rounding (up to 31 each).
    /// It also covers the framing a rendering ([`TaskLog::render`]) adds: at
    /// most 44 bytes to a line (`+{ms}ms {source} [replay] ` and the newline) and 2
    /// to a field (` ` and `=`). So what the host holds of a log, and the log
    /// as text but for its last line ([`TaskLog::MAX_TRAILER`]), are each
    /// within `max_log`.
    pub const ENTRY_COST: u64 = 128;

    /// What keeping this record costs of the log's budget: its text, and
    /// [`LogRecord::ENTRY_COST`] for itself and for each of its fields.
    pub fn cost(&self) -> u64 {
        let entries = 1 + self.fields.len() as u64;
        (text_len(&self.message, &self.fields) as u64)
            .saturating_add(entries.saturating_mul(Self::ENTRY_COST))
    }
}

/// Bytes of a record's message, keys and values.
fn text_len(message: &str, fields: &[(String, String)]) -> usize {
    let fields: usize = fields.iter().map(|(k, v)| k.len() + v.len()).sum();
    message.len() + fields
}

/// Everything an execution logged, within its budget.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskLog {
    pub records: Vec<LogRecord>,
    /// Records dropped because the budget was spent.
    pub dropped_records: u64,
    /// Bytes of text (messages, keys and values) of those records, as the
    /// lambda sent them.
    pub dropped_bytes: u64,
}

impl TaskLog {
    /// The longest line [`TaskLog::render`] adds to say what was dropped:
    /// the text of the line with both counts at 20 digits.
    pub const MAX_TRAILER: u64 = 96;

    /// Whether records were dropped for want of budget.
    pub fn truncated(&self) -> bool {
        self.dropped_records > 0
    }

    /// The log as text, one record a line (`+12ms info message k=v`), then
    /// a line saying what was dropped, if anything was; `None` for an empty
    /// log. Each line is shorter than its record's [`LogRecord::cost`], so
    /// the text of a log kept within a budget is within it plus
    /// [`TaskLog::MAX_TRAILER`].
    pub fn render(&self) -> Option<String> {
        use std::fmt::Write;
        if self.records.is_empty() && !self.truncated() {
            return None;
        }
        let mut text = String::new();
        for record in &self.records {
            let _ = write!(
                text,
                "+{}ms {} {}{}",
                record.at.as_millis(),
                record.source,
                if record.replayed { "[replay] " } else { "" },
                record.message
            );
            for (key, value) in &record.fields {
                let _ = write!(text, " {key}={value}");
            }
            text.push('\n');
        }
        if self.truncated() {
            let _ = writeln!(
                text,
                "[{} records ({} bytes) dropped: the log budget was spent]",
                self.dropped_records, self.dropped_bytes
            );
        }
        Some(text)
    }
}

/// Longest unfinished line kept from stdout or stderr before it is cut
/// into a record; so the host holds at most this much of each stream
/// besides the records.
const MAX_PARTIAL_LINE: usize = 8 * 1024;

/// The shared, bounded log of one execution. Cheap to clone.
#[derive(Clone)]
pub(crate) struct LogSink {
    state: Arc<Mutex<SinkState>>,
    kill: KillSwitch,
}

struct SinkState {
    started: Instant,
    redactor: Arc<Redactor>,
    /// What is left of the budget, in [`LogRecord::cost`]s.
    budget: u64,
    /// The most records the whole budget could pay for: the list of records
    /// never reserves room for more.
    max_records: usize,
    log: TaskLog,
    /// The unfinished last line of each stream.
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    /// Set while the execution replays its journal.
    replaying: Option<Arc<AtomicBool>>,
    /// Bytes the splitting of lines looked at or copied.
    #[cfg(test)]
    touched: u64,
}

impl LogSink {
    pub(crate) fn new(
        budget: u64,
        started: Instant,
        kill: KillSwitch,
        redactor: Arc<Redactor>,
    ) -> Self {
        Self {
            state: Arc::new(Mutex::new(SinkState {
                started,
                redactor,
                budget,
                max_records: usize::try_from(budget / LogRecord::ENTRY_COST).unwrap_or(usize::MAX),
                log: TaskLog::default(),
                stdout: Vec::new(),
                stderr: Vec::new(),
                replaying: None,
                #[cfg(test)]
                touched: 0,
            })),
            kill,
        }
    }

    /// Marks what is logged while `replaying` is set as replayed.
    pub(crate) fn marking_replay(self, replaying: Arc<AtomicBool>) -> Self {
        self.lock().replaying = Some(replaying);
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SinkState> {
        // A panic while holding the lock leaves only a partial log behind.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn record(&self, source: LogSource, message: String, fields: Vec<(String, String)>) {
        let sent = text_len(&message, &fields);
        self.lock().push(source, message, fields, sent);
    }

    /// Takes a write to stdout or stderr, unless the execution was stopped.
    pub(crate) fn write_stream(&self, source: LogSource, bytes: &[u8]) -> Result<(), String> {
        if let Some(reason) = self.kill.reason() {
            return Err(format!("execution stopped: {reason}"));
        }
        self.lock().split(source, bytes);
        Ok(())
    }

    /// Ends the log: flushes partial lines and returns what was kept.
    pub(crate) fn finish(&self) -> TaskLog {
        let mut state = self.lock();
        for source in [LogSource::Stdout, LogSource::Stderr] {
            let rest = std::mem::take(state.partial(source));
            if !rest.is_empty() {
                state.push_line(source, &rest);
            }
        }
        std::mem::take(&mut state.log)
    }
}

impl SinkState {
    /// Whether the budget is spent: what is left cannot pay for a record,
    /// however empty, so everything from now on is only counted.
    fn spent(&self) -> bool {
        self.budget < LogRecord::ENTRY_COST
    }

    /// Counts `records` dropped records of `bytes` bytes of text.
    fn count_dropped(&mut self, records: u64, bytes: u64) {
        self.log.dropped_records = self.log.dropped_records.saturating_add(records);
        self.log.dropped_bytes = self.log.dropped_bytes.saturating_add(bytes);
    }

    /// Keeps the record if the budget can pay for it, else counts it as
    /// `sent` bytes, its length as the lambda sent it.
    fn push(
        &mut self,
        source: LogSource,
        message: String,
        fields: Vec<(String, String)>,
        sent: usize,
    ) {
        if self.spent() {
            return self.count_dropped(1, sent as u64);
        }
        let (message, fields) = if self.redactor.is_empty() {
            (message, fields)
        } else {
            let redactor = &self.redactor;
            (
                redactor.text(message),
                fields
                    .into_iter()
                    .map(|(k, v)| (redactor.text(k), redactor.text(v)))
                    .collect(),
            )
        };
        let record = LogRecord {
            at: self.started.elapsed(),
            source,
            message,
            fields,
            replayed: self
                .replaying
                .as_ref()
                .is_some_and(|flag| flag.load(Ordering::Relaxed)),
        };
        let cost = record.cost();
        if cost > self.budget {
            return self.count_dropped(1, sent as u64);
        }
        self.budget -= cost;
        let records = &mut self.log.records;
        if records.len() == records.capacity() {
            // Room for as many again, but never for more than the budget
            // could pay for.
            let most = self.max_records.saturating_sub(records.len()).max(1);
            records.reserve_exact(records.len().max(4).min(most));
        }
        records.push(record);
    }

    /// Cuts one write to stdout or stderr into records, a line each, in one
    /// pass: each byte is looked at once by the search for newlines, and
    /// copied at most once into the unfinished line.
    fn split(&mut self, source: LogSource, bytes: &[u8]) {
        let mut rest = bytes;
        while let Some(end) = memchr::memchr(b'\n', rest) {
            self.touched(end + 1);
            if self.spent() {
                rest = self.count_lines(source, rest);
                break;
            }
            let (line, after) = (&rest[..end], &rest[end + 1..]);
            if self.partial(source).is_empty() {
                self.push_line(source, line);
            } else {
                self.touched(line.len());
                let partial = self.partial(source);
                partial.extend_from_slice(line);
                let line = std::mem::take(partial);
                self.push_line(source, &line);
            }
            rest = after;
        }
        self.touched(rest.len());
        let partial = self.partial(source);
        partial.extend_from_slice(rest);
        if partial.len() > MAX_PARTIAL_LINE {
            let line = std::mem::take(partial);
            self.push_line(source, &line);
        }
    }

    /// Once the budget is spent: counts the lines `bytes` completes as
    /// dropped, at once, and returns what follows the last of them.
    fn count_lines<'a>(&mut self, source: LogSource, bytes: &'a [u8]) -> &'a [u8] {
        let Some(last) = memchr::memrchr(b'\n', bytes) else {
            return bytes;
        };
        let (lines, rest) = bytes.split_at(last + 1);
        self.touched(rest.len() + 1 + lines.len());
        let count = memchr::memchr_iter(b'\n', lines).count();
        let text = lines.len() - count + std::mem::take(self.partial(source)).len();
        self.count_dropped(count as u64, text as u64);
        rest
    }

    fn push_line(&mut self, source: LogSource, line: &[u8]) {
        if self.spent() {
            return self.count_dropped(1, line.len() as u64);
        }
        let text = String::from_utf8_lossy(line).into_owned();
        self.push(source, text, Vec::new(), line.len());
    }

    /// The unfinished line of `source`; only the two streams have one.
    fn partial(&mut self, source: LogSource) -> &mut Vec<u8> {
        match source {
            LogSource::Stderr => &mut self.stderr,
            LogSource::Stdout | LogSource::Lambda(_) | LogSource::Waft => &mut self.stdout,
        }
    }

    #[cfg(test)]
    fn touched(&mut self, bytes: usize) {
        self.touched += bytes as u64;
    }

    #[cfg(not(test))]
    fn touched(&mut self, _bytes: usize) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sink(budget: u64) -> LogSink {
        LogSink::new(budget, Instant::now(), KillSwitch::new(), Arc::default())
    }

    fn write(log: &LogSink, source: LogSource, bytes: &[u8]) {
        assert_eq!(log.write_stream(source, bytes), Ok(()));
    }

    #[test]
    fn stream_writes_become_one_record_per_line() {
        let log = sink(1024);
        write(&log, LogSource::Stdout, b"one\ntw");
        write(&log, LogSource::Stdout, b"o\nthree");
        write(&log, LogSource::Stderr, b"oops\n");
        let log = log.finish();
        let lines: Vec<(LogSource, &str)> = log
            .records
            .iter()
            .map(|r| (r.source, r.message.as_str()))
            .collect();
        assert_eq!(
            lines,
            [
                (LogSource::Stdout, "one"),
                (LogSource::Stdout, "two"),
                (LogSource::Stderr, "oops"),
                (LogSource::Stdout, "three"),
            ]
        );
    }

    #[test]
    fn records_past_the_budget_are_dropped_and_counted() {
        let log = sink(LogRecord::ENTRY_COST + 10);
        log.record(LogSource::Lambda(Level::Info), "12345".into(), vec![]);
        log.record(LogSource::Lambda(Level::Info), "123456".into(), vec![]);
        log.record(
            LogSource::Lambda(Level::Info),
            "1234".into(),
            vec![("k".into(), "x".into())],
        );
        let log = log.finish();
        assert_eq!(log.records.len(), 1);
        assert_eq!(log.records[0].cost(), LogRecord::ENTRY_COST + 5);
        assert_eq!((log.dropped_records, log.dropped_bytes), (2, 12));
        assert!(log.truncated());
    }

    /// Empty records, empty fields and bare newlines cost their fixed share:
    /// a million of them keep no more than the budget pays for.
    #[test]
    fn a_million_empty_records_keep_to_the_budget() {
        let log = sink(1024);
        for i in 0..1_000_000 {
            let fields = if i % 2 == 0 {
                vec![]
            } else {
                vec![(String::new(), String::new())]
            };
            log.record(LogSource::Lambda(Level::Info), String::new(), fields);
        }
        write(&log, LogSource::Stdout, &[b'\n'; 1000]);
        let kept = log.lock().log.records.capacity() as u64;
        assert!(
            kept <= 1024 / LogRecord::ENTRY_COST,
            "room for {kept} records"
        );
        let log = log.finish();
        assert!(
            log.records.len() as u64 <= 1024 / LogRecord::ENTRY_COST,
            "{} records kept",
            log.records.len()
        );
        assert!(log.records.iter().map(LogRecord::cost).sum::<u64>() <= 1024);
        assert_eq!(log.records.len() as u64 + log.dropped_records, 1_001_000);
        assert_eq!(log.dropped_bytes, 0);
    }

    #[test]
    fn the_rendered_log_stays_within_the_budget_and_its_trailer() {
        let log = sink(1024);
        for i in 0..200 {
            let message = "m".repeat(i % 7);
            let fields = vec![("k".repeat(i % 3), String::new()); i % 4];
            log.record(LogSource::Lambda(Level::Warn), message, fields);
            write(&log, LogSource::Stderr, b"\n\nx\n");
        }
        let log = log.finish();
        assert!(log.truncated());
        let rendered = log.render().map_or(0, |text| text.len() as u64);
        assert!(
            rendered <= 1024 + TaskLog::MAX_TRAILER,
            "{} records render as {rendered} bytes",
            log.records.len()
        );
    }

    /// The framing of a line and the trailer at their longest.
    #[test]
    fn every_line_is_within_its_cost_and_the_trailer_within_its_bound() {
        let empty = |fields| LogRecord {
            at: Duration::MAX,
            source: LogSource::Stderr,
            message: String::new(),
            fields,
            replayed: true,
        };
        for record in [
            empty(vec![]),
            empty(vec![(String::new(), String::new()); 9]),
        ] {
            let cost = record.cost();
            let log = TaskLog {
                records: vec![record],
                ..TaskLog::default()
            };
            let line = log.render().unwrap_or_default();
            assert!(line.len() as u64 <= cost, "{line:?} costs {cost}");
        }
        let dropped = TaskLog {
            dropped_records: u64::MAX,
            dropped_bytes: u64::MAX,
            ..TaskLog::default()
        };
        let trailer = dropped.render().unwrap_or_default();
        assert!(trailer.len() as u64 <= TaskLog::MAX_TRAILER, "{trailer:?}");
    }

    #[test]
    fn splitting_lines_touches_each_byte_a_bounded_number_of_times() {
        let log = sink(1024);
        let newlines = [b'\n'; 64 * 1024];
        let long = [b'x'; 9000];
        let mut written = 0;
        for bytes in [&newlines[..], b"a\nbc", &long, b"d\n\n", &newlines] {
            write(&log, LogSource::Stdout, bytes);
            written += bytes.len() as u64;
        }
        let touched = log.lock().touched;
        assert!(
            touched <= 3 * written,
            "{touched} bytes touched splitting {written}"
        );
        let log = log.finish();
        assert_eq!(
            log.records.len() as u64 + log.dropped_records,
            2 * 65536 + 4
        );
    }

    /// Lines counted once the budget is spent have the same records and
    /// bytes as lines dropped one by one, unfinished lines included.
    #[test]
    fn lines_past_the_budget_are_counted_with_their_bytes() {
        let log = sink(LogRecord::ENTRY_COST + 3);
        write(&log, LogSource::Stdout, b"abc\nxy");
        write(&log, LogSource::Stderr, b"e");
        write(&log, LogSource::Stdout, b"z\n\nlast");
        write(&log, LogSource::Stdout, b" one");
        log.record(LogSource::Lambda(Level::Info), "1".into(), vec![]);
        let log = log.finish();
        assert_eq!(log.records.len(), 1);
        assert_eq!(log.records[0].message, "abc");
        // "xyz", "", "last one", "1" and stderr's "e".
        assert_eq!((log.dropped_records, log.dropped_bytes), (5, 13));
    }

    #[test]
    fn a_killed_execution_cannot_write() {
        let kill = KillSwitch::new();
        let log = LogSink::new(1024, Instant::now(), kill.clone(), Arc::default());
        assert!(log.write_stream(LogSource::Stdout, b"before\n").is_ok());
        kill.kill("lease lost");
        assert!(log.write_stream(LogSource::Stdout, b"after\n").is_err());
        assert_eq!(log.finish().records.len(), 1);
    }
}
