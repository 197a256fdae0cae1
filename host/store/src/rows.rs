//! Reading rows into the model, the same way for every backend.
//!
//! Each model row has a struct with the columns' names and database types
//! (`TaskRow`, `LambdaRow`, ...), declared with [`row!`] to decode on
//! either backend's rows, and a conversion into the model that checks
//! ranges and parses names and JSON. A column renamed in a statement but
//! not here fails the conformance suite at its first read, with the
//! column's name.
//!
//! A row may have been written by another release during a rolling upgrade
//! (docs/upgrades.md): JSON is read leniently (fields this binary does not
//! know are ignored, missing ones take their defaults), while a name it does
//! not know (a status, a role) makes the row an error, never a guess.

use std::time::Duration;

use waft_core::retention::Retention;
use waft_core::{
    Backoff, ByteSize, KeyFairness, KeyRate, LambdaConfig, Limits, OnDivergence, TaskStatus,
};

use sqlx::FromRow;

use crate::{Attempt, Cron, JournalEntry, Lambda, Millis, StoreError, Task, Token};

mod row;
pub(crate) use self::row::row;

/// Typed column access shared by the backends' row types.
pub(crate) trait RowExt {
    fn int(&self, column: &str) -> Result<i64, StoreError>;
    fn opt_int(&self, column: &str) -> Result<Option<i64>, StoreError>;
    fn text(&self, column: &str) -> Result<String, StoreError>;
    fn flag(&self, column: &str) -> Result<bool, StoreError>;
}

fn small<T: TryFrom<i64>>(value: i64, column: &str) -> Result<T, StoreError> {
    T::try_from(value)
        .map_err(|_| StoreError::Corrupt(format!("{column} = {value} is out of range")))
}

/// Decodes `row` as `T`, then converts it into the model.
fn decode<'r, R, T, M>(row: &'r R) -> Result<M, StoreError>
where
    R: sqlx::Row,
    T: FromRow<'r, R> + TryInto<M, Error = StoreError>,
{
    T::from_row(row)?.try_into()
}

fn parse<T: std::str::FromStr>(what: &str, name: String) -> Result<T, StoreError> {
    name.parse()
        .map_err(|_| StoreError::Corrupt(format!("{what} {name:?}")))
}

fn json<T: serde::de::DeserializeOwned>(what: &str, json: &str) -> Result<T, StoreError> {
    serde_json::from_str(json).map_err(|e| StoreError::Corrupt(format!("{what} {json:?}: {e}")))
}

/// The columns [`task`] reads, for `SELECT` and `RETURNING` lists.
pub(crate) const TASK_COLUMNS: &str = "id, lambda, collection, priority, payload, status, attempt, \
    max_attempts, scheduled_at, next_trigger_at, held, parked, awaits_turn, paced, key_paced, debounced, \
    enqueue_token, lease_token, created_at, enqueued_at, claimed_at, heartbeat_at, finished_at, \
    progress, last_error, log, output, parent_id, idempotency_key, key, cron_id, version, continuation, wait_kind, wait_signal";

row! {
    /// A row of `tasks`, as [`TASK_COLUMNS`] selects it.
    pub(crate) struct TaskRow {
        id: String,
        lambda: String,
        collection: String,
        priority: i64,
        payload: Vec<u8>,
        status: String,
        attempt: i64,
        max_attempts: i64,
        scheduled_at: Millis,
        next_trigger_at: Option<Millis>,
        held: bool,
        parked: bool,
        paced: bool,
        key_paced: bool,
        debounced: bool,
        awaits_turn: bool,
        enqueue_token: i64,
        lease_token: i64,
        created_at: Millis,
        enqueued_at: Option<Millis>,
        claimed_at: Option<Millis>,
        heartbeat_at: Option<Millis>,
        finished_at: Option<Millis>,
        progress: Option<String>,
        last_error: Option<String>,
        log: Option<String>,
        output: Option<Vec<u8>>,
        parent_id: Option<String>,
        idempotency_key: Option<String>,
        key: Option<String>,
        cron_id: Option<String>,
        version: Option<i64>,
        continuation: Option<String>,
        wait_kind: Option<String>,
        wait_signal: Option<String>,
    }
}

impl TryFrom<TaskRow> for Task {
    type Error = StoreError;

    fn try_from(row: TaskRow) -> Result<Self, StoreError> {
        let free_text = |text: Option<String>| text.map(crate::support::text_out);
        let status: TaskStatus = parse("status", row.status)?;
        Ok(Task {
            id: row.id,
            lambda: row.lambda,
            collection: row.collection,
            priority: small(row.priority, "priority")?,
            payload: row.payload,
            status,
            attempt: small(row.attempt, "attempt")?,
            max_attempts: small(row.max_attempts, "max_attempts")?,
            scheduled_at: row.scheduled_at,
            next_trigger_at: row.next_trigger_at,
            held: row.held,
            parked: row.parked,
            paced: row.paced,
            key_paced: row.key_paced,
            debounced: row.debounced,
            awaits_turn: row.awaits_turn,
            enqueue_token: row.enqueue_token,
            lease_token: row.lease_token,
            created_at: row.created_at,
            enqueued_at: row.enqueued_at,
            claimed_at: row.claimed_at,
            heartbeat_at: row.heartbeat_at,
            finished_at: row.finished_at,
            progress: free_text(row.progress),
            last_error: free_text(row.last_error),
            log: free_text(row.log),
            output: row.output,
            parent_id: row.parent_id,
            idempotency_key: free_text(row.idempotency_key),
            key: free_text(row.key),
            cron_id: row.cron_id,
            version: row.version.map(|v| small(v, "version")).transpose()?,
            continuation: row
                .continuation
                .map(|text| json("continuation", &text))
                .transpose()?,
            // Kept from the task's last suspension: a task that left it
            // waits for nothing.
            waiting_for_signal: (status == TaskStatus::Suspended)
                .then_some(row.wait_signal)
                .flatten()
                .map(crate::support::text_out),
            waiting_for_children: status == TaskStatus::Suspended
                && row.wait_kind.as_deref() == Some("children"),
        })
    }
}

pub(crate) fn task<'r, R: sqlx::Row>(row: &'r R) -> Result<Task, StoreError>
where
    TaskRow: FromRow<'r, R>,
{
    decode::<R, TaskRow, Task>(row)
}

pub(crate) fn status(row: &impl RowExt) -> Result<TaskStatus, StoreError> {
    task_status(row.text("status")?)
}

/// A status as a row holds it.
/// The trace context a row keeps. A value this binary cannot read (none
/// it writes) is dropped rather than failing the row: a task runs
/// whatever its trace.
pub(crate) fn trace(
    traceparent: Option<String>,
    tracestate: Option<String>,
) -> Option<waft_core::TraceContext> {
    waft_core::TraceContext::parse(&traceparent?, tracestate.as_deref()).ok()
}

pub(crate) fn task_status(name: String) -> Result<TaskStatus, StoreError> {
    parse("status", name)
}

/// A lambda's backoff, from the columns `backoff_base_ms`,
/// `backoff_factor` and `backoff_max_ms`.
/// A lambda version's fairness from its columns: the weights (JSON; none
/// when the lambda is not fair) and the lookahead (the default when NULL,
/// as a version deployed by an earlier release keeps it).
pub(crate) fn key_fairness(
    weights: Option<&str>,
    lookahead: Option<i64>,
) -> Result<Option<KeyFairness>, StoreError> {
    let Some(weights) = weights else {
        return Ok(None);
    };
    Ok(Some(KeyFairness {
        weights: json("key_fairness", weights)?,
        lookahead: lookahead
            .map(|lookahead| small(lookahead, "key_lookahead"))
            .transpose()?
            .unwrap_or(KeyFairness::DEFAULT_LOOKAHEAD),
    }))
}

pub(crate) fn backoff_of(base_ms: i64, factor: f64, max_ms: i64) -> Result<Backoff, StoreError> {
    Ok(Backoff {
        base: Duration::from_millis(small(base_ms, "backoff_base_ms")?),
        factor,
        max: Duration::from_millis(small(max_ms, "backoff_max_ms")?),
    })
}

/// The columns [`lambda`] reads: a `lambdas l JOIN lambda_versions v`.
pub(crate) const LAMBDA_COLUMNS: &str = "l.name, v.version, v.digest, v.max_memory, v.timeout_ms, \
    v.fuel, v.max_output, v.max_log, v.max_attempts, v.backoff_base_ms, v.backoff_factor, \
    v.backoff_max_ms, v.priorities, v.default_priority, v.max_payload, v.concurrency, \
    v.quota_per_sec, v.key_concurrency, v.key_rate_count, v.key_rate_period_ms, \
    v.key_fairness, v.key_lookahead, v.allowed_children, v.grants, v.on_divergence, v.retention, \
    v.created_at";

row! {
    /// A lambda at a version, as [`LAMBDA_COLUMNS`] selects it.
    pub(crate) struct LambdaRow {
        name: String,
        version: i64,
        digest: String,
        max_memory: i64,
        timeout_ms: i64,
        fuel: Option<i64>,
        max_output: i64,
        max_log: i64,
        max_attempts: i64,
        backoff_base_ms: i64,
        backoff_factor: f64,
        backoff_max_ms: i64,
        priorities: i64,
        default_priority: i64,
        max_payload: i64,
        concurrency: i64,
        quota_per_sec: Option<f64>,
        key_concurrency: Option<i64>,
        key_rate_count: Option<i64>,
        key_rate_period_ms: Option<i64>,
        key_fairness: Option<String>,
        key_lookahead: Option<i64>,
        allowed_children: String,
        grants: String,
        on_divergence: String,
        retention: Option<String>,
        created_at: Millis,
    }
}

impl TryFrom<LambdaRow> for Lambda {
    type Error = StoreError;

    fn try_from(row: LambdaRow) -> Result<Self, StoreError> {
        let bytes = |value: i64, column: &str| -> Result<ByteSize, StoreError> {
            Ok(ByteSize::b(small(value, column)?))
        };
        Ok(Lambda {
            name: row.name,
            version: small(row.version, "version")?,
            digest: row.digest,
            config: LambdaConfig {
                limits: Limits {
                    max_memory: bytes(row.max_memory, "max_memory")?,
                    timeout: Duration::from_millis(small(row.timeout_ms, "timeout_ms")?),
                    fuel: row.fuel.map(|fuel| small(fuel, "fuel")).transpose()?,
                    max_output: bytes(row.max_output, "max_output")?,
                    max_log: bytes(row.max_log, "max_log")?,
                },
                max_attempts: small(row.max_attempts, "max_attempts")?,
                backoff: backoff_of(row.backoff_base_ms, row.backoff_factor, row.backoff_max_ms)?,
                priorities: small(row.priorities, "priorities")?,
                default_priority: small(row.default_priority, "default_priority")?,
                max_payload: bytes(row.max_payload, "max_payload")?,
                concurrency: small(row.concurrency, "concurrency")?,
                quota_per_sec: row.quota_per_sec,
                key_concurrency: row
                    .key_concurrency
                    .map(|n| {
                        u32::try_from(n).map_err(|_| StoreError::Corrupt("key_concurrency".into()))
                    })
                    .transpose()?,
                key_rate: match (row.key_rate_count, row.key_rate_period_ms) {
                    (Some(count), Some(period)) => Some(KeyRate {
                        count: small(count, "key_rate_count")?,
                        period: Duration::from_millis(small(period, "key_rate_period_ms")?),
                    }),
                    _ => None,
                },
                key_fairness: key_fairness(row.key_fairness.as_deref(), row.key_lookahead)?,
                allowed_children: row.allowed_children.lines().map(str::to_owned).collect(),
                grants: json("grants", &row.grants)?,
                on_divergence: OnDivergence::parse(&row.on_divergence).ok_or_else(|| {
                    StoreError::Corrupt(format!("on_divergence {:?}", row.on_divergence))
                })?,
                retention: row
                    .retention
                    .as_deref()
                    .map(Retention::from_json)
                    .transpose()
                    .map_err(StoreError::Corrupt)?
                    .unwrap_or_default(),
            },
            created_at: row.created_at,
        })
    }
}

pub(crate) fn lambda<'r, R: sqlx::Row>(row: &'r R) -> Result<Lambda, StoreError>
where
    LambdaRow: FromRow<'r, R>,
{
    decode::<R, LambdaRow, Lambda>(row)
}

/// The columns [`cron`] reads.
pub(crate) const CRON_COLUMNS: &str =
    "id, lambda, cron, timezone, payload, collection, key, priority, catch_up, next_at, created_at";

row! {
    /// A row of `crons`.
    pub(crate) struct CronRow {
        id: String,
        lambda: String,
        cron: String,
        timezone: String,
        payload: Vec<u8>,
        collection: Option<String>,
        key: Option<String>,
        priority: Option<i64>,
        catch_up: bool,
        next_at: Millis,
        created_at: Millis,
    }
}

impl TryFrom<CronRow> for Cron {
    type Error = StoreError;

    fn try_from(row: CronRow) -> Result<Self, StoreError> {
        Ok(Cron {
            id: row.id,
            lambda: row.lambda,
            cron: row.cron,
            timezone: row.timezone,
            payload: row.payload,
            collection: row.collection,
            key: row.key.map(crate::support::text_out),
            priority: row.priority.map(|p| small(p, "priority")).transpose()?,
            catch_up: row.catch_up,
            next_at: row.next_at,
            created_at: row.created_at,
        })
    }
}

pub(crate) fn cron<'r, R: sqlx::Row>(row: &'r R) -> Result<Cron, StoreError>
where
    CronRow: FromRow<'r, R>,
{
    decode::<R, CronRow, Cron>(row)
}

row! {
    /// A row of `attempts`.
    pub(crate) struct AttemptRow {
        attempt: i64,
        lease_token: i64,
        outcome: String,
        error: Option<String>,
        log: Option<String>,
        started_at: Option<Millis>,
        ended_at: Millis,
        replayed: i64,
    }
}

impl TryFrom<AttemptRow> for Attempt {
    type Error = StoreError;

    fn try_from(row: AttemptRow) -> Result<Self, StoreError> {
        Ok(Attempt {
            attempt: small(row.attempt, "attempt")?,
            lease_token: row.lease_token,
            outcome: parse("attempt outcome", row.outcome)?,
            error: row.error.map(crate::support::text_out),
            log: row.log.map(crate::support::text_out),
            started_at: row.started_at,
            ended_at: row.ended_at,
            replayed: small(row.replayed, "replayed")?,
        })
    }
}

pub(crate) fn attempt<'r, R: sqlx::Row>(row: &'r R) -> Result<Attempt, StoreError>
where
    AttemptRow: FromRow<'r, R>,
{
    decode::<R, AttemptRow, Attempt>(row)
}

row! {
    /// A row of `journal` (`sql/journal.rs` names its columns).
    pub(crate) struct JournalRow {
        seq: i64,
        call: String,
        digest: Vec<u8>,
        answer: Vec<u8>,
        summary: String,
        outside: bool,
        attempt: i64,
        at: Millis,
        took_us: i64,
    }
}

impl TryFrom<JournalRow> for JournalEntry {
    type Error = StoreError;

    fn try_from(row: JournalRow) -> Result<Self, StoreError> {
        Ok(JournalEntry {
            seq: small(row.seq, "seq")?,
            call: crate::support::text_out(row.call),
            digest: row.digest,
            answer: row.answer,
            summary: crate::support::text_out(row.summary),
            outside: row.outside,
            attempt: small(row.attempt, "attempt")?,
            at: row.at,
            took_us: small(row.took_us, "took_us")?,
        })
    }
}

pub(crate) fn journal_entry<'r, R: sqlx::Row>(row: &'r R) -> Result<JournalEntry, StoreError>
where
    JournalRow: FromRow<'r, R>,
{
    decode::<R, JournalRow, JournalEntry>(row)
}

row! {
    /// A row of `tokens`.
    pub(crate) struct TokenRow {
        id: String,
        name: String,
        role: String,
        lambdas: String,
        created_at: Millis,
        revoked_at: Option<Millis>,
    }
}

impl TryFrom<TokenRow> for Token {
    type Error = StoreError;

    fn try_from(row: TokenRow) -> Result<Self, StoreError> {
        Ok(Token {
            id: row.id,
            name: crate::support::text_out(row.name),
            role: parse("token role", row.role)?,
            lambdas: json("token lambdas", &row.lambdas)?,
            created_at: row.created_at,
            revoked_at: row.revoked_at,
        })
    }
}

pub(crate) fn token<'r, R: sqlx::Row>(row: &'r R) -> Result<Token, StoreError>
where
    TokenRow: FromRow<'r, R>,
{
    decode::<R, TokenRow, Token>(row)
}

/// The names each state column may hold, by the latest migration that
/// checks it (the baseline's `CHECK`, or a later migration that adds a
/// state), are exactly the names these rows decode: the model's enums. A
/// variant added to an enum fails here until a migration pair lets the
/// databases hold it.
#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use waft_core::{OnDivergence, TaskStatus};

    use crate::{AttemptOutcome, GateState, TokenRole};

    /// The `CHECK (column IN (...))` list of the last migration that has
    /// one, as compiled into the backend.
    fn latest_check(migrator: &sqlx::migrate::Migrator, column: &str) -> BTreeSet<String> {
        let start = format!("CHECK ({column} IN (");
        let sql = migrator
            .iter()
            .rev()
            .map(|migration| migration.sql.as_str())
            .find(|sql| sql.contains(&start))
            .unwrap_or_else(|| panic!("no migration has {start:?}"));
        checked(sql, column)
    }

    /// The quoted names of `CHECK (column IN (...))` in a migration.
    fn checked(sql: &str, column: &str) -> BTreeSet<String> {
        let start = format!("CHECK ({column} IN (");
        let at = sql
            .find(&start)
            .unwrap_or_else(|| panic!("no {start:?} in the migration"));
        let list = &sql[at + start.len()..];
        let list = &list[..list.find(')').expect("the list closes")];
        list.split('\'')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    }

    fn names<T>(all: impl IntoIterator<Item = T>, name: fn(T) -> &'static str) -> BTreeSet<String> {
        all.into_iter().map(|v| name(v).to_owned()).collect()
    }

    // Every variant, held complete by an exhaustive match.
    fn outcomes() -> [AttemptOutcome; 5] {
        use AttemptOutcome::*;
        let all = [Success, Retriable, Fatal, Lost, Suspended];
        for outcome in all {
            match outcome {
                Success | Retriable | Fatal | Lost | Suspended => {}
            }
        }
        all
    }

    fn gate_states() -> [GateState; 3] {
        use GateState::*;
        let all = [Open, Paused, Dropped];
        for state in all {
            match state {
                Open | Paused | Dropped => {}
            }
        }
        all
    }

    fn roles() -> [TokenRole; 3] {
        use TokenRole::*;
        let all = [Admin, Owner, Scheduler];
        for role in all {
            match role {
                Admin | Owner | Scheduler => {}
            }
        }
        all
    }

    #[test]
    fn the_database_checks_the_models_names() {
        let backends = [
            ("sqlite", &crate::sqlite::MIGRATOR),
            ("postgres", &crate::postgres::MIGRATOR),
        ];
        for (backend, migrator) in backends {
            let expected = [
                ("status", names(TaskStatus::ALL, TaskStatus::as_str)),
                ("outcome", names(outcomes(), AttemptOutcome::as_str)),
                ("state", names(gate_states(), GateState::as_str)),
                ("role", names(roles(), TokenRole::as_str)),
                (
                    "on_divergence",
                    names(OnDivergence::ALL, OnDivergence::as_str),
                ),
            ];
            for (column, names) in expected {
                assert_eq!(latest_check(migrator, column), names, "{backend}: {column}");
            }
        }
    }
}
