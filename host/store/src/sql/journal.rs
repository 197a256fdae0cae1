//! Journals: the host calls of a task's executions and the answers they
//! got, kept in order across attempts so that the next attempt replays
//! them instead of calling again (see `waft_core::model::JournalEntry`).
//!
//! A write is fenced exactly like a heartbeat — only the execution holding
//! the task's lease may write, whether alone ([`write`]) or with its result
//! (`result.rs`) — and replaces the journal from a point on, so that the
//! rows of a task are always its entries `0 .. journal_len`, which the
//! claim hands out. The first entries pin the task to the version that
//! wrote them (`journal_version`): a retry must replay them on the code
//! that made them. Only a redrive onto a version, or a fresh one, discards
//! a journal ([`discard`]).

use std::borrow::Cow;

use serde::Serialize;
use sqlx::FromRow;

use super::{Connection, DIALECT, Store};
use crate::names::status::RUNNING;
use crate::rows;
use crate::rules::check_journal_write;
use crate::support::{batch_json, sql, text_in};
use crate::{
    JournalEntry, JournalWrite, Millis, Refusal, Result, StoreError, TaskJournalRead,
    TaskJournalWrite,
};

/// JSON bytes one insert statement carries at most: a write of many large
/// answers is cut into statements of about this size, so no one parameter
/// nears what a database takes (Postgres's `jsonb` ends at 256 MiB).
const STATEMENT_BYTES: usize = 8 << 20;

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

/// A task as a refused journal write reads it.
#[derive(FromRow)]
struct Fence {
    status: String,
    lease_token: i64,
    journal_len: i64,
}

/// A running execution's write to its task's journal, alone.
pub(super) async fn write(
    tx: &mut Connection,
    params: TaskJournalWrite,
) -> Result<Result<(), Refusal>> {
    check_journal_write(&params.id, &params.write)?;
    apply(
        tx,
        &params.id,
        params.lease_token,
        Some(params.version),
        &params.write,
    )
    .await
}

/// Applies a checked write ([`check_journal_write`]) to task `id`'s
/// journal, if `lease` still holds the task: its entries from
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
        "UPDATE tasks SET journal_len = $3, journal_version = CASE WHEN CAST($3 AS BIGINT) > 0 THEN \
            COALESCE(CAST($4 AS BIGINT), claimed_version, journal_version, version, \
            (SELECT current_version FROM lambdas WHERE name = tasks.lambda)) END \
         WHERE id = $1 AND lease_token = $2 AND (status IN {RUNNING}) IS TRUE \
         AND journal_len >= $5 RETURNING id"
    )))
    .bind(text_in(id))
    .bind(lease)
    .bind(i64::from(write.end()))
    .bind(version.map(i64::from))
    .bind(i64::from(write.from))
    .fetch_optional(&mut *tx)
    .await?;
    if fenced.is_none() {
        return refusal(tx, id, lease, write.from).await.map(Err);
    }
    sqlx::query("DELETE FROM journal WHERE task_id = $1 AND seq >= $2")
        .bind(text_in(id))
        .bind(i64::from(write.from))
        .execute(&mut *tx)
        .await?;
    insert(tx, id, &write.entries).await?;
    Ok(Ok(()))
}

/// Inserts entries, in statements of at most about [`STATEMENT_BYTES`].
async fn insert(tx: &mut Connection, id: &str, entries: &[JournalEntry]) -> Result<()> {
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
            "INSERT INTO journal (task_id, seq, call, digest, answer, summary, outside, \
             attempt, at, took_us) \
             SELECT $2, CAST(j.value->>'seq' AS BIGINT), j.value->>'call', {digest}, {answer}, \
             j.value->>'summary', CAST(j.value->>'outside' AS BIGINT) <> 0, \
             CAST(j.value->>'attempt' AS BIGINT), CAST(j.value->>'at' AS BIGINT), \
             CAST(j.value->>'took_us' AS BIGINT) FROM {rows}",
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
/// would get, or — under the current lease — a write past the journal's
/// end, which is the runtime's bug.
async fn refusal(conn: &mut Connection, id: &str, lease: i64, from: u32) -> Result<Refusal> {
    let row: Option<Fence> =
        sqlx::query_as("SELECT status, lease_token, journal_len FROM tasks WHERE id = $1")
            .bind(text_in(id))
            .fetch_optional(&mut *conn)
            .await?;
    let Some(row) = row else {
        return Ok(Refusal::NotFound);
    };
    let status = rows::task_status(row.status)?;
    if row.lease_token != lease {
        return Ok(Refusal::StaleLease {
            current: row.lease_token,
        });
    }
    if !waft_core::machine::RUNNING.contains(status) {
        return Ok(Refusal::WrongState(status));
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

/// Deletes the journals of tasks `ids`, as the database keeps them, and
/// the signals they were sent (whose takes the journals counted): a
/// redrive that starts them afresh (the statement that redrives them
/// empties `journal_len` and `journal_version`).
pub(super) async fn discard(conn: &mut Connection, ids: &[String]) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let ids: Vec<_> = ids.iter().map(|id| Discarded { id }).collect();
    let ids = batch_json(&ids)?;
    for table in ["journal", "signals"] {
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
