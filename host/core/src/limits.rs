//! The limits a lambda runs under, and what the pipeline carries.
//!
//! Each limit bounds one resource and, when breached, ends the task with an
//! outcome of its own, so an owner can tell a memory hog from a slow lambda
//! from a chatty one.
//!
//! A task's payload, output and log travel between Waft's processes in
//! batches (claims, heartbeats, results), each batch one message under
//! [`MAX_INTERNAL_MESSAGE`]. So the bounds on the limits are what one message
//! can carry: a task whose payload or output could not cross would be
//! claimed or finished and then lost, again and again. Every batch is cut by
//! bytes ([`MAX_BATCH_BYTES`]) as well as by count, and what no batch could
//! carry is refused up front — at deploy, at schedule — or, for what slipped
//! past earlier bounds, fails alone with the reason.

use std::time::Duration;

use crate::ByteSize;

/// The largest message one Waft process accepts from another: a request to
/// the Controller or the HSC, or its answer (16 MiB).
pub const MAX_INTERNAL_MESSAGE: usize = 16 << 20;

/// The most bytes one batch between Waft's processes carries, counted by
/// the size of each item's fields plus [`ITEM_OVERHEAD`]: the message limit
/// less 512 KiB for the framing the count leaves out. An item over it
/// travels alone, and fails alone.
pub const MAX_BATCH_BYTES: usize = MAX_INTERNAL_MESSAGE - (512 << 10);

/// What one item of a batch is counted for beyond its strings and bytes:
/// its field tags, lengths and numbers (under 100 bytes in the encoding).
pub const ITEM_OVERHEAD: usize = 128;

/// The largest payload or output one task carries through the pipeline
/// (15 MiB): with its ids and names it is one item within
/// [`MAX_BATCH_BYTES`], and an output leaves room beside it for a log of
/// the default budget.
pub const MAX_CARRIED: ByteSize = ByteSize::mib(15);

// A task at the largest payload, with the longest names a task has (an id,
// a lambda and a collection name), is one item of a batch, and so is an
// output at the bound beside a log of the default budget; a batch leaves
// room for framing.
const _: () = {
    let names = 26 + 2 * 63;
    assert!(MAX_CARRIED.bytes() as usize + names + ITEM_OVERHEAD <= MAX_BATCH_BYTES);
    let log = Limits::DEFAULT_MAX_LOG.bytes() as usize;
    assert!(MAX_CARRIED.bytes() as usize + log + 26 + ITEM_OVERHEAD <= MAX_BATCH_BYTES);
    assert!(MAX_BATCH_BYTES < MAX_INTERNAL_MESSAGE);
};

/// The most entries a task's journal holds (100,000): an execution that
/// would make more host calls stops, its limit breached. A journal is read
/// whole into the executor that replays it.
pub const MAX_JOURNAL_ENTRIES: u32 = 100_000;

/// The most bytes a task's journal holds, answers included (64 MiB); an
/// execution that would write more stops, its limit breached.
pub const MAX_JOURNAL_BYTES: usize = 64 << 20;

/// The largest answer one journal entry keeps (an HTTP response with its
/// body): one entry travels between processes in one message.
pub const MAX_JOURNAL_ANSWER: usize = MAX_CARRIED.bytes() as usize;

/// The longest progress note a heartbeat carries (4 KiB): a line or two for
/// people. A longer one is cut short by [`cut_note`].
pub const MAX_PROGRESS_NOTE: usize = 4 << 10;

/// The most signals a task keeps (1,000): one more is refused, so that a
/// client sending in a loop cannot grow a task without bound.
pub const MAX_SIGNALS: u32 = 1_000;

/// The most bytes a task's kept signals hold (64 MiB, as its journal):
/// payloads and names, each signal counted [`ITEM_OVERHEAD`] more. One
/// that would pass it is refused, so that a client cannot make the store
/// hold [`MAX_SIGNALS`] payloads of the largest size for one task; more
/// than the journal holds could never all be taken anyway, since each
/// wait journals the payload it took.
pub const MAX_SIGNAL_BYTES: usize = MAX_JOURNAL_BYTES;

/// The largest signal payload whatever the lambda's `max_payload`: a
/// wait's answer is journaled, and one entry's answer holds at most
/// [`MAX_JOURNAL_ANSWER`] with its framing.
pub const MAX_SIGNAL_PAYLOAD: usize = MAX_JOURNAL_ANSWER - 64;

/// The most children one fan-in waits for (10,000): the ids travel in one
/// suspension and one journal entry.
pub const MAX_AWAITED: usize = 10_000;

/// The longest signal name, in bytes (128).
pub const MAX_SIGNAL_NAME: usize = 128;

/// Refuses a signal name that is empty, longer than [`MAX_SIGNAL_NAME`]
/// or holds a control character (it is shown in logs and on pages).
///
/// ```
/// use waft_core::limits::check_signal_name;
/// assert!(check_signal_name("approved").is_ok());
/// assert!(check_signal_name("").is_err());
/// assert!(check_signal_name("a\nb").is_err());
/// ```
pub fn check_signal_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("a signal needs a name".into());
    }
    if name.len() > MAX_SIGNAL_NAME {
        return Err(format!(
            "signal name of {} bytes is over the {MAX_SIGNAL_NAME} a name may have",
            name.len()
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(format!("signal name {name:?} holds a control character"));
    }
    Ok(())
}

/// Refuses a payload of `len` bytes for `lambda` that no claim could carry
/// to an executor, whatever the lambda's version allows (one deployed under
/// an earlier, wider bound): stored, its task could never run.
///
/// ```
/// use waft_core::limits::{MAX_CARRIED, check_payload};
/// assert!(check_payload("resize", MAX_CARRIED.as_usize()).is_ok());
/// let refused = check_payload("resize", MAX_CARRIED.as_usize() + 1).unwrap_err();
/// assert!(refused.contains("15MiB"), "{refused}");
/// ```
pub fn check_payload(lambda: &str, len: usize) -> Result<(), String> {
    if len > MAX_CARRIED.as_usize() {
        return Err(format!(
            "payload of {len} bytes for lambda {lambda:?} is over the {MAX_CARRIED} one task \
             carries between Waft's processes"
        ));
    }
    Ok(())
}

/// `note` as a heartbeat carries it: [`cut_text`] to [`MAX_PROGRESS_NOTE`].
///
/// ```
/// use waft_core::limits::{MAX_PROGRESS_NOTE, cut_note};
/// assert_eq!(cut_note("step 3 of 9".into()), "step 3 of 9");
/// let cut = cut_note("é".repeat(MAX_PROGRESS_NOTE));
/// assert!(cut.len() <= MAX_PROGRESS_NOTE && cut.starts_with('é'));
/// assert!(cut.ends_with(&format!("[{} bytes in all]", 2 * MAX_PROGRESS_NOTE)));
/// ```
pub fn cut_note(note: String) -> String {
    cut_text(note, MAX_PROGRESS_NOTE)
}

/// `text` in at most `max` bytes: unchanged when it fits, else its
/// beginning, cut on a character boundary, and a mark saying how long it
/// was (only the mark's beginning when `max` leaves room for no more).
pub fn cut_text(text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mark = format!("… [{} bytes in all]", text.len());
    let mut end = max.saturating_sub(mark.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut cut = text;
    cut.truncate(end);
    cut.push_str(&mark);
    let mut end = max.min(cut.len());
    while !cut.is_char_boundary(end) {
        end -= 1;
    }
    cut.truncate(end);
    cut
}

/// Resource limits of one lambda's executions.
///
/// ```
/// use waft_core::{ByteSize, Limits};
/// let limits = Limits { max_memory: ByteSize::mib(32), ..Limits::default() };
/// limits.validate().unwrap();
/// assert!(Limits { max_memory: ByteSize::b(0), ..limits }.validate().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Linear memory an instance may grow to (default 64 MiB).
    pub max_memory: ByteSize,
    /// Wall-clock time from the start of the call (default 30 s).
    pub timeout: Duration,
    /// WebAssembly fuel (roughly, instructions) an execution may burn; `None`
    /// leaves CPU bounded by `timeout` alone (the default).
    pub fuel: Option<u64>,
    /// Bytes of output a successful task may return (default 1 MiB).
    pub max_output: ByteSize,
    /// Bytes of log (log calls, stdout, stderr) kept per execution; beyond
    /// it records are dropped and counted (default 256 KiB).
    pub max_log: ByteSize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_memory: ByteSize::mib(64),
            timeout: Duration::from_secs(30),
            fuel: None,
            max_output: ByteSize::mib(1),
            max_log: Self::DEFAULT_MAX_LOG,
        }
    }
}

/// Bounds on the limits themselves: a limit outside them is a mistake, not a
/// configuration.
impl Limits {
    /// The log kept per execution unless the lambda says otherwise.
    pub const DEFAULT_MAX_LOG: ByteSize = ByteSize::kib(256);
    /// The smallest memory a component can run in: one 64 KiB page.
    pub const MIN_MEMORY: ByteSize = ByteSize::kib(64);
    /// The largest memory a 32-bit WebAssembly instance can address.
    pub const MAX_MEMORY: ByteSize = ByteSize::gib(4);
    /// The shortest timeout: anything shorter cannot even instantiate.
    pub const MIN_TIMEOUT: Duration = Duration::from_millis(1);
    /// The longest timeout: longer work belongs in several tasks.
    pub const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);
    /// The largest output and log sizes: what one task carries through the
    /// pipeline ([`MAX_CARRIED`]); tasks are not a bulk data channel.
    pub const MAX_OUTPUT: ByteSize = MAX_CARRIED;

    /// Checks every limit against its bounds.
    pub fn validate(&self) -> Result<(), LimitsError> {
        let out_of_range = |limit: &'static str, value: String, range: String| {
            Err(LimitsError::OutOfRange {
                limit,
                value,
                range,
            })
        };
        if self.max_memory < Self::MIN_MEMORY || self.max_memory > Self::MAX_MEMORY {
            return out_of_range(
                "max memory",
                self.max_memory.to_string(),
                format!("{}..={}", Self::MIN_MEMORY, Self::MAX_MEMORY),
            );
        }
        if self.timeout < Self::MIN_TIMEOUT || self.timeout > Self::MAX_TIMEOUT {
            return out_of_range(
                "timeout",
                format!("{:?}", self.timeout),
                format!("{:?}..={:?}", Self::MIN_TIMEOUT, Self::MAX_TIMEOUT),
            );
        }
        if self.fuel == Some(0) {
            return out_of_range("fuel", "0".into(), "at least 1".into());
        }
        for (limit, value) in [("max output", self.max_output), ("max log", self.max_log)] {
            if value > Self::MAX_OUTPUT {
                return out_of_range(
                    limit,
                    value.to_string(),
                    format!(
                        "0..={}, the most one task carries between Waft's processes",
                        Self::MAX_OUTPUT
                    ),
                );
            }
        }
        Ok(())
    }
}

/// A limit outside its bounds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitsError {
    #[error("{limit} of {value} is out of range: it must be within {range}")]
    OutOfRange {
        limit: &'static str,
        value: String,
        range: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        Limits::default().validate().unwrap();
    }

    #[test]
    fn each_bound_is_enforced_with_a_message_naming_the_limit() {
        let base = Limits::default();
        let cases = [
            (
                Limits {
                    max_memory: ByteSize::b(0),
                    ..base
                },
                "max memory",
            ),
            (
                Limits {
                    max_memory: ByteSize::gib(5),
                    ..base
                },
                "max memory",
            ),
            (
                Limits {
                    timeout: Duration::ZERO,
                    ..base
                },
                "timeout",
            ),
            (
                Limits {
                    timeout: Duration::from_secs(90_000),
                    ..base
                },
                "timeout",
            ),
            (
                Limits {
                    fuel: Some(0),
                    ..base
                },
                "fuel",
            ),
            (
                Limits {
                    max_output: ByteSize::gib(1),
                    ..base
                },
                "max output",
            ),
            (
                Limits {
                    max_log: ByteSize::gib(1),
                    ..base
                },
                "max log",
            ),
        ];
        for (limits, name) in cases {
            let message = limits.validate().unwrap_err().to_string();
            assert!(message.starts_with(name), "{message}");
        }
    }

    #[test]
    fn an_output_the_pipeline_cannot_carry_is_refused_and_says_why() {
        let at_most = Limits {
            max_output: MAX_CARRIED,
            max_log: MAX_CARRIED,
            ..Limits::default()
        };
        at_most.validate().unwrap();
        let message = Limits {
            max_output: ByteSize::mib(16),
            ..Limits::default()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(message.contains("0..=15MiB"), "{message}");
        assert!(message.contains("between Waft's processes"), "{message}");
    }

    #[test]
    fn a_long_note_is_cut_on_a_character_boundary_and_marked() {
        let fits = "n".repeat(MAX_PROGRESS_NOTE);
        assert_eq!(cut_note(fits.clone()), fits);
        for unit in ["n", "é", "€", "😀"] {
            let long = unit.repeat(MAX_PROGRESS_NOTE + 1);
            let cut = cut_note(long.clone());
            assert!(cut.len() <= MAX_PROGRESS_NOTE, "{} bytes", cut.len());
            let kept = cut.split('…').next().unwrap();
            assert!(kept.len() > MAX_PROGRESS_NOTE / 2, "{} kept", kept.len());
            assert!(long.starts_with(kept));
            assert!(cut.ends_with(&format!("[{} bytes in all]", long.len())));
        }
        let one_over = "n".repeat(MAX_PROGRESS_NOTE + 1);
        assert!(cut_note(one_over).len() <= MAX_PROGRESS_NOTE);
    }

    #[test]
    fn text_is_cut_to_any_room_even_one_too_small_for_the_mark() {
        for max in [0, 1, 2, 3, 5, 20, 100] {
            let cut = cut_text("😀".repeat(100), max);
            assert!(cut.len() <= max, "{} bytes in {max}", cut.len());
        }
        assert_eq!(cut_text("abc".into(), 3), "abc");
        assert_eq!(
            cut_text("abcdefghij".repeat(10), 30),
            "abcdefgh… [100 bytes in all]"
        );
    }
}
