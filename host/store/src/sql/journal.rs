//! Journals: the host calls of a task's executions and the answers they
//! got, kept in order across attempts so that the next attempt replays
//! them instead of calling again (see `waft_core::model::JournalEntry`).
//!
//! A write is fenced like a heartbeat — only the execution holding the
//! task's lease may write, whether alone ([`write`]) or with its result
//! (`result.rs`) — and replaces the journal from a point on, so that the
//! rows of a task are always its entries `0 .. journal_len`, which the
//! claim hands out. The first entries pin the task to the version that
//! wrote them (`journal_version`): a retry must replay them on the code
//! that made them. Only a redrive onto a version, or a fresh one, discards
//! a journal ([`discard`]).
//!
//! Two more rules keep a write from undoing one that came after it, or
//! from landing in halves:
//!
//! - **In turn.** An execution numbers the messages it sends under its
//!   lease ([`JournalPart::after`]); the task counts those it took
//!   (`journal_writes`, of the lease in `journal_lease`). A message is
//!   taken only in its turn. A late copy of an earlier one — a retried
//!   call whose first copy was held up, in another HSC perhaps — is
//!   refused ([`StoreError::JournalOutOfTurn`]) instead of replacing what
//!   was written since; the journal's length alone could not tell it, as a
//!   hole answered rewrites the tail at the same length. A copy of the
//!   message taken last is answered as written: it is the retry of a call
//!   whose answer was lost.
//! - **Whole.** A write larger than one message comes as parts: each but
//!   the last is staged (`journal_staged`, which no read sees), and the
//!   last replaces the journal from the write's start with the staged
//!   entries and its own, in one transaction. An execution that dies
//!   between parts leaves the journal as it was — answers a rewritten tail
//!   held included; the staged rows go with the next write, a redrive or
//!   the task.
//!
//! A write without a part (from an executor of an earlier release, during
//! a rolling upgrade, and a result's tail) is whole and taken whatever its
//! turn, as before.

use std::borrow::Cow;

use serde::Serialize;

use super::{Connection, DIALECT, Store};
use crate::names::status::RUNNING;
use crate::rows::{self, row};
use crate::rules::{check_journal_part, check_journal_write};
use crate::support::{batch_json, sql, text_in};
use crate::{
    JournalEntry, JournalPart, JournalWrite, Millis, Refusal, Result, StoreError, TaskJournalRead,
    TaskJournalWrite,
};

/// JSON bytes one insert statement carries at most: a write of many large
/// answers is cut into statements of about this size, so no one parameter
/// nears what a database takes (Postgres's `jsonb` ends at 256 MiB).
const STATEMENT_BYTES: usize = 8 << 20;

/// The columns of an entry, in `journal` and `journal_staged` alike.
const COLUMNS: &str = "task_id, seq, call, digest, answer, summary, outside, attempt, at, took_us";

/// The messages of the task's current lease the task has taken: none
/// while `journal_lease` names an earlier lease.
const WRITES_TAKEN: &str = "CASE WHEN journal_lease = lease_token THEN journal_writes ELSE 0 END";

/// An entry as the insert reads it (the field names are its JSON keys):
/// text kept escaped, bytes as hex.
#[derive(Serialize)]
struct EntryRow<'a> {
    seq: u32,
    call: Cow<'a, str>,
    digest: String,
    answer: String,
    summary: Cow<'a, str>,
    outside: u8,
    attempt: u32,
    at: Millis,
    took_us: i64,
}

impl<'a> EntryRow<'a> {
    fn new(entry: &'a JournalEntry) -> Self {
        Self {
            seq: entry.seq,
            call: text_in(&entry.call),
            digest: hex::encode(&entry.digest),
            answer: hex::encode(&entry.answer),
            summary: text_in(&entry.summary),
            outside: u8::from(entry.outside),
            attempt: entry.attempt,
            at: entry.at,
            took_us: i64::try_from(entry.took_us).unwrap_or(i64::MAX),
        }
    }

    /// About the bytes it takes in the statement's JSON.
    fn size(entry: &JournalEntry) -> usize {
        entry.wire_size() + entry.digest.len() + entry.answer.len()
    }
}

/// A task whose journal a redrive discards, as [`discard`] reads it.
#[derive(Serialize)]
struct Discarded<'a> {
    id: &'a str,
}

row! {
    /// A task as a refused journal write reads it.
    struct Fence {
        status: String,
        lease_token: i64,
        journal_len: i64,
        writes: i64,
    }
}

/// Where a write's entries go: the journal, or the parts staged before a
/// write's last.
#[derive(Clone, Copy)]
enum Table {
    Journal,
    Staged,
}

impl Table {
    fn name(self) -> &'static str {
        match self {
            Table::Journal => "journal",
            Table::Staged => "journal_staged",
        }
    }
}

/// A running execution's write to its task's journal, alone: in turn
/// and whole when it names its part, as before when it does not.
pub(super) async fn write(
    tx: &mut Connection,
    params: TaskJournalWrite,
) -> Result<Result<(), Refusal>> {
    check_journal_write(&params.id, &params.write)?;
    let Some(part) = params.part else {
        return apply(
            tx,
            &params.id,
            params.lease_token,
            Some(params.version),
            &params.write,
        )
        .await;
    };
    check_journal_part(&params.id, &params.write, &part)?;
    let (id, write) = (params.id.as_str(), &params.write);
    // The fence, in turn; the last part also sets the journal's length
    // and the version it pins.
    let ends = if part.more {
        String::new()
    } else {
        format!(
            ", journal_len = $5, journal_version = {}",
            pinned("$5", "$6")
        )
    };
    let mut fence = sqlx::query_scalar(sql(format!(
        "UPDATE tasks SET journal_lease = lease_token, journal_writes = $4 + 1{ends} \
         WHERE id = $1 AND lease_token = $2 AND (status IN {RUNNING}) IS TRUE \
         AND journal_len >= $3 AND {WRITES_TAKEN} = $4 RETURNING id"
    )))
    .bind(text_in(id))
    .bind(params.lease_token)
    .bind(i64::from(part.start))
    .bind(i64::from(part.after));
    if !part.more {
        fence = fence
            .bind(i64::from(write.end()))
            .bind(i64::from(params.version));
    }
    let fenced: Option<String> = fence.fetch_optional(&mut *tx).await?;
    if fenced.is_none() {
        return refusal(tx, id, params.lease_token, part.start, Some(part)).await;
    }
    if write.from > part.start {
        staged_run(tx, id, part.start, write.from).await?;
    }
    if part.more {
        if write.from == part.start {
            unstage(tx, id).await?;
        }
        return insert(tx, Table::Staged, id, &write.entries).await.map(Ok);
    }
    delete_from(tx, id, part.start).await?;
    if write.from > part.start {
        sqlx::query(sql(format!(
            "INSERT INTO journal ({COLUMNS}) SELECT {COLUMNS} FROM journal_staged \
             WHERE task_id = $1 AND seq >= $2 AND seq < $3"
        )))
        .bind(text_in(id))
        .bind(i64::from(part.start))
        .bind(i64::from(write.from))
        .execute(&mut *tx)
        .await?;
    }
    unstage(tx, id).await?;
    insert(tx, Table::Journal, id, &write.entries).await?;
    Ok(Ok(()))
}

/// The version a write that leaves the journal `len` entries long pins:
/// none when it leaves it empty; else the one it names (`version`), or —
/// for a result, which names none — the one its lease was claimed with.
fn pinned(len: &str, version: &str) -> String {
    format!(
        "CASE WHEN CAST({len} AS BIGINT) > 0 THEN \
         COALESCE(CAST({version} AS BIGINT), claimed_version, journal_version, version, \
         (SELECT current_version FROM lambdas WHERE name = tasks.lambda)) END"
    )
}

/// Applies a checked write ([`check_journal_write`]) to task `id`'s
/// journal whole, if `lease` still holds the task: its entries from
/// `write.from` on are replaced, and the task pinned to `version` while
/// its journal holds entries — to the version its lease was claimed with
/// when `None` (a result, which does not say). A write refused by the
/// lease changes nothing; one that would leave a hole (from past the
/// journal's end) is an error.
pub(super) async fn apply(
    tx: &mut Connection,
    id: &str,
    lease: i64,
    version: Option<u32>,
    write: &JournalWrite,
) -> Result<Result<(), Refusal>> {
    // The fence first: on Postgres it also locks the row, so nothing
    // changes the journal between it and the rows' statements.
    let fenced: Option<String> = sqlx::query_scalar(sql(format!(
        "UPDATE tasks SET journal_len = $3, journal_version = {pinned} \
         WHERE id = $1 AND lease_token = $2 AND (status IN {RUNNING}) IS TRUE \
         AND journal_len >= $5 RETURNING id",
        pinned = pinned("$3", "$4"),
    )))
    .bind(text_in(id))
    .bind(lease)
    .bind(i64::from(write.end()))
    .bind(version.map(i64::from))
    .bind(i64::from(write.from))
    .fetch_optional(&mut *tx)
    .await?;
    if fenced.is_none() {
        return refusal(tx, id, lease, write.from, None).await;
    }
    delete_from(tx, id, write.from).await?;
    unstage(tx, id).await?;
    insert(tx, Table::Journal, id, &write.entries).await?;
    Ok(Ok(()))
}

/// Deletes task `id`'s journal entries from `from` on.
async fn delete_from(tx: &mut Connection, id: &str, from: u32) -> Result<()> {
    sqlx::query("DELETE FROM journal WHERE task_id = $1 AND seq >= $2")
        .bind(text_in(id))
        .bind(i64::from(from))
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// Deletes the parts staged for task `id`.
async fn unstage(tx: &mut Connection, id: &str) -> Result<()> {
    sqlx::query("DELETE FROM journal_staged WHERE task_id = $1")
        .bind(text_in(id))
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// Checks that the parts before one starting at `from` staged every entry
/// of their write from `start`: taken in turn, they did, unless the
/// executor numbered its parts wrong.
async fn staged_run(tx: &mut Connection, id: &str, start: u32, from: u32) -> Result<()> {
    let staged: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM journal_staged WHERE task_id = $1 AND seq >= $2 AND seq < $3",
    )
    .bind(text_in(id))
    .bind(i64::from(start))
    .bind(i64::from(from))
    .fetch_one(&mut *tx)
    .await?;
    if staged == i64::from(from - start) {
        return Ok(());
    }
    Err(StoreError::Invalid(format!(
        "a journal write of task {id} continues at entry {from} a write from entry {start}, \
         but its parts before staged {staged} entries: nothing was written"
    )))
}

/// Inserts entries into `table`, in statements of at most about
/// [`STATEMENT_BYTES`].
async fn insert(
    tx: &mut Connection,
    table: Table,
    id: &str,
    entries: &[JournalEntry],
) -> Result<()> {
    let mut rest = entries;
    while !rest.is_empty() {
        let mut bytes = 0;
        let count = rest
            .iter()
            .take_while(|entry| {
                bytes += EntryRow::size(entry);
                bytes <= STATEMENT_BYTES
            })
            .count()
            .max(1);
        let (chunk, after) = rest.split_at(count);
        let rows: Vec<_> = chunk.iter().map(EntryRow::new).collect();
        sqlx::query(sql(format!(
            "INSERT INTO {table} ({COLUMNS}) \
             SELECT $2, CAST(j.value->>'seq' AS BIGINT), j.value->>'call', {digest}, {answer}, \
             j.value->>'summary', CAST(j.value->>'outside' AS BIGINT) <> 0, \
             CAST(j.value->>'attempt' AS BIGINT), CAST(j.value->>'at' AS BIGINT), \
             CAST(j.value->>'took_us' AS BIGINT) FROM {rows}",
            table = table.name(),
            digest = DIALECT.unhex("j.value->>'digest'"),
            answer = DIALECT.unhex("j.value->>'answer'"),
            rows = DIALECT.json_rows,
        )))
        .bind(batch_json(&rows)?)
        .bind(text_in(id))
        .execute(&mut *tx)
        .await?;
        rest = after;
    }
    Ok(())
}

/// Why a journal write's fence touched no row: the refusal a heartbeat
/// would get; under the current lease, a message out of turn (`part`'s,
/// if it has one) — or the copy of the one taken last, which is answered
/// as written — or a write past the journal's end, which is the runtime's
/// bug.
async fn refusal(
    conn: &mut Connection,
    id: &str,
    lease: i64,
    from: u32,
    part: Option<JournalPart>,
) -> Result<Result<(), Refusal>> {
    let row: Option<Fence> = sqlx::query_as(sql(format!(
        "SELECT status, lease_token, journal_len, {WRITES_TAKEN} AS writes \
         FROM tasks WHERE id = $1"
    )))
    .bind(text_in(id))
    .fetch_optional(&mut *conn)
    .await?;
    let Some(row) = row else {
        return Ok(Err(Refusal::NotFound));
    };
    let status = rows::task_status(row.status)?;
    if row.lease_token != lease {
        return Ok(Err(Refusal::StaleLease {
            current: row.lease_token,
        }));
    }
    if !waft_core::machine::RUNNING.contains(status) {
        return Ok(Err(Refusal::WrongState(status)));
    }
    if let Some(part) = part {
        let taken = u32::try_from(row.writes).unwrap_or(u32::MAX);
        if taken == part.after.saturating_add(1) {
            return Ok(Ok(()));
        }
        if taken != part.after {
            return Err(StoreError::JournalOutOfTurn {
                id: id.to_owned(),
                after: part.after,
                taken,
            });
        }
    }
    Err(StoreError::Invalid(format!(
        "a journal write of task {id} starts at entry {from}, past the journal's end \
         ({}): it would leave a hole; nothing was written",
        row.journal_len
    )))
}

/// A page of a task's journal, in order; nothing for an unknown task.
pub(super) async fn read(store: &Store, params: TaskJournalRead) -> Result<Vec<JournalEntry>> {
    // Without answers, the column is not read at all: a person's view of
    // a journal of large HTTP responses costs their summaries only.
    let answer = if params.without_answers {
        format!("{} AS answer", DIALECT.unhex("''"))
    } else {
        "answer".to_owned()
    };
    let rows = sqlx::query(sql(format!(
        "SELECT seq, call, digest, {answer}, summary, outside, attempt, at, took_us \
         FROM journal WHERE task_id = $1 AND seq >= $2 ORDER BY seq LIMIT $3"
    )))
    .bind(text_in(&params.id))
    .bind(i64::from(params.from))
    .bind(i64::from(params.limit))
    .fetch_all(&store.pool)
    .await?;
    rows.iter().map(rows::journal_entry).collect()
}

/// Deletes the journals of tasks `ids`, as the database keeps them (parts
/// staged included), and the signals they were sent (whose takes the
/// journals counted): a redrive that starts them afresh (the statement
/// that redrives them empties `journal_len` and `journal_version`).
pub(super) async fn discard(conn: &mut Connection, ids: &[String]) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let ids: Vec<_> = ids.iter().map(|id| Discarded { id }).collect();
    let ids = batch_json(&ids)?;
    for table in ["journal", "journal_staged", "signals"] {
        sqlx::query(sql(format!(
            "DELETE FROM {table} WHERE task_id IN (SELECT j.value->>'id' FROM {})",
            DIALECT.json_rows
        )))
        .bind(&ids)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}
