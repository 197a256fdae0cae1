//! Durable lambdas' journals: entries and the writes that change them.
//!
//! An entry's strings travel as protobuf strings and its digest and answer
//! as bytes, so every value a Rust string holds (NUL included) arrives as
//! it left.

use waft_core::model::{JournalEntry, JournalPart, JournalWrite};

use crate::proto;

pub fn journal_entry_to_proto(entry: JournalEntry) -> proto::JournalEntry {
    proto::JournalEntry {
        seq: entry.seq,
        call: entry.call,
        digest: entry.digest,
        answer: entry.answer,
        summary: entry.summary,
        outside: entry.outside,
        attempt: entry.attempt,
        at_ms: entry.at,
        took_us: entry.took_us,
    }
}

pub fn journal_entry_from_proto(entry: proto::JournalEntry) -> JournalEntry {
    JournalEntry {
        seq: entry.seq,
        call: entry.call,
        digest: entry.digest,
        answer: entry.answer,
        summary: entry.summary,
        outside: entry.outside,
        attempt: entry.attempt,
        at: entry.at_ms,
        took_us: entry.took_us,
    }
}

pub fn journal_write_to_proto(write: JournalWrite) -> proto::JournalWrite {
    proto::JournalWrite {
        from: write.from,
        entries: write
            .entries
            .into_iter()
            .map(journal_entry_to_proto)
            .collect(),
    }
}

pub fn journal_part_to_proto(part: JournalPart) -> proto::JournalPart {
    proto::JournalPart {
        after: part.after,
        start: part.start,
        more: part.more,
    }
}

/// Where a journal write's message stands, as sent: the store checks it.
pub fn journal_part_from_proto(part: proto::JournalPart) -> JournalPart {
    JournalPart {
        after: part.after,
        start: part.start,
        more: part.more,
    }
}

/// A journal write as sent: the HSC checks its numbering and bounds.
pub fn journal_write_from_proto(write: proto::JournalWrite) -> JournalWrite {
    JournalWrite {
        from: write.from,
        entries: write
            .entries
            .into_iter()
            .map(journal_entry_from_proto)
            .collect(),
    }
}
