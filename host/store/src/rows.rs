//! Reading rows into the model, the same way for every backend.

use std::time::Duration;

use waft_core::{Backoff, ByteSize, LambdaConfig, Limits, TaskStatus};

use crate::{Attempt, Cron, Lambda, StoreError, Task, Token};

/// Typed column access shared by the backends' row types.
pub(crate) trait RowExt {
    fn int(&self, column: &str) -> Result<i64, StoreError>;
    fn opt_int(&self, column: &str) -> Result<Option<i64>, StoreError>;
    fn real(&self, column: &str) -> Result<f64, StoreError>;
    fn opt_real(&self, column: &str) -> Result<Option<f64>, StoreError>;
    fn text(&self, column: &str) -> Result<String, StoreError>;
    fn opt_text(&self, column: &str) -> Result<Option<String>, StoreError>;
    fn bytes(&self, column: &str) -> Result<Vec<u8>, StoreError>;
    fn opt_bytes(&self, column: &str) -> Result<Option<Vec<u8>>, StoreError>;
    fn flag(&self, column: &str) -> Result<bool, StoreError>;
}

/// A free-text column, as it was given (see [`crate::support::text_in`]).
fn free_text(row: &impl RowExt, column: &str) -> Result<Option<String>, StoreError> {
    Ok(row.opt_text(column)?.map(crate::support::text_out))
}

fn small<T: TryFrom<i64>>(value: i64, column: &str) -> Result<T, StoreError> {
    T::try_from(value)
        .map_err(|_| StoreError::Corrupt(format!("{column} = {value} is out of range")))
}

/// The columns [`task`] reads, for `SELECT` and `RETURNING` lists.
pub(crate) const TASK_COLUMNS: &str = "id, lambda, collection, priority, payload, status, attempt, \
    max_attempts, scheduled_at, next_trigger_at, held, enqueue_token, lease_token, created_at, \
    enqueued_at, claimed_at, heartbeat_at, finished_at, progress, last_error, log, output, parent_id, \
    idempotency_key, cron_id, version, continuation";

pub(crate) fn task(row: &impl RowExt) -> Result<Task, StoreError> {
    let status = row.text("status")?;
    Ok(Task {
        id: row.text("id")?,
        lambda: row.text("lambda")?,
        collection: row.text("collection")?,
        priority: small(row.int("priority")?, "priority")?,
        payload: row.bytes("payload")?,
        status: status
            .parse()
            .map_err(|_| StoreError::Corrupt(format!("status {status:?}")))?,
        attempt: small(row.int("attempt")?, "attempt")?,
        max_attempts: small(row.int("max_attempts")?, "max_attempts")?,
        scheduled_at: row.int("scheduled_at")?,
        next_trigger_at: row.opt_int("next_trigger_at")?,
        held: row.flag("held")?,
        enqueue_token: row.int("enqueue_token")?,
        lease_token: row.int("lease_token")?,
        created_at: row.int("created_at")?,
        enqueued_at: row.opt_int("enqueued_at")?,
        claimed_at: row.opt_int("claimed_at")?,
        heartbeat_at: row.opt_int("heartbeat_at")?,
        finished_at: row.opt_int("finished_at")?,
        progress: free_text(row, "progress")?,
        last_error: free_text(row, "last_error")?,
        log: free_text(row, "log")?,
        output: row.opt_bytes("output")?,
        parent_id: row.opt_text("parent_id")?,
        idempotency_key: free_text(row, "idempotency_key")?,
        cron_id: row.opt_text("cron_id")?,
        version: row
            .opt_int("version")?
            .map(|v| small(v, "version"))
            .transpose()?,
        continuation: row
            .opt_text("continuation")?
            .map(|json| {
                serde_json::from_str(&json)
                    .map_err(|e| StoreError::Corrupt(format!("continuation {json:?}: {e}")))
            })
            .transpose()?,
    })
}

pub(crate) fn status(row: &impl RowExt) -> Result<TaskStatus, StoreError> {
    let status = row.text("status")?;
    status
        .parse()
        .map_err(|_| StoreError::Corrupt(format!("status {status:?}")))
}

/// A lambda's backoff, from the columns `backoff_base_ms`,
/// `backoff_factor` and `backoff_max_ms`.
pub(crate) fn backoff(row: &impl RowExt) -> Result<Backoff, StoreError> {
    let ms = |column: &str| -> Result<Duration, StoreError> {
        Ok(Duration::from_millis(small(row.int(column)?, column)?))
    };
    Ok(Backoff {
        base: ms("backoff_base_ms")?,
        factor: row.real("backoff_factor")?,
        max: ms("backoff_max_ms")?,
    })
}

/// The columns [`lambda`] reads: a `lambdas l JOIN lambda_versions v`.
pub(crate) const LAMBDA_COLUMNS: &str = "l.name, v.version, v.digest, v.max_memory, v.timeout_ms, \
    v.fuel, v.max_output, v.max_log, v.max_attempts, v.backoff_base_ms, v.backoff_factor, \
    v.backoff_max_ms, v.priorities, v.default_priority, v.max_payload, v.concurrency, \
    v.quota_per_sec, v.allowed_children, v.grants, v.created_at";

pub(crate) fn lambda(row: &impl RowExt) -> Result<Lambda, StoreError> {
    let ms = |column: &str| -> Result<Duration, StoreError> {
        Ok(Duration::from_millis(small(row.int(column)?, column)?))
    };
    let bytes = |column: &str| -> Result<ByteSize, StoreError> {
        Ok(ByteSize::b(small(row.int(column)?, column)?))
    };
    let fuel = match row.opt_int("fuel")? {
        Some(fuel) => Some(small(fuel, "fuel")?),
        None => None,
    };
    Ok(Lambda {
        name: row.text("name")?,
        version: small(row.int("version")?, "version")?,
        digest: row.text("digest")?,
        config: LambdaConfig {
            limits: Limits {
                max_memory: bytes("max_memory")?,
                timeout: ms("timeout_ms")?,
                fuel,
                max_output: bytes("max_output")?,
                max_log: bytes("max_log")?,
            },
            max_attempts: small(row.int("max_attempts")?, "max_attempts")?,
            backoff: backoff(row)?,
            priorities: small(row.int("priorities")?, "priorities")?,
            default_priority: small(row.int("default_priority")?, "default_priority")?,
            max_payload: bytes("max_payload")?,
            concurrency: small(row.int("concurrency")?, "concurrency")?,
            quota_per_sec: row.opt_real("quota_per_sec")?,
            allowed_children: row
                .text("allowed_children")?
                .lines()
                .map(str::to_owned)
                .collect(),
            grants: {
                let json = row.text("grants")?;
                serde_json::from_str(&json)
                    .map_err(|e| StoreError::Corrupt(format!("grants {json:?}: {e}")))?
            },
        },
        created_at: row.int("created_at")?,
    })
}

/// The columns [`schedule`] reads.
pub(crate) const CRON_COLUMNS: &str =
    "id, lambda, cron, timezone, payload, collection, priority, catch_up, next_at, created_at";

pub(crate) fn cron(row: &impl RowExt) -> Result<Cron, StoreError> {
    let priority = match row.opt_int("priority")? {
        Some(p) => Some(small(p, "priority")?),
        None => None,
    };
    Ok(Cron {
        id: row.text("id")?,
        lambda: row.text("lambda")?,
        cron: row.text("cron")?,
        timezone: row.text("timezone")?,
        payload: row.bytes("payload")?,
        collection: row.opt_text("collection")?,
        priority,
        catch_up: row.flag("catch_up")?,
        next_at: row.int("next_at")?,
        created_at: row.int("created_at")?,
    })
}

pub(crate) fn attempt(row: &impl RowExt) -> Result<Attempt, StoreError> {
    let outcome = row.text("outcome")?;
    Ok(Attempt {
        attempt: small(row.int("attempt")?, "attempt")?,
        lease_token: row.int("lease_token")?,
        outcome: outcome
            .parse()
            .map_err(|_| StoreError::Corrupt(format!("attempt outcome {outcome:?}")))?,
        error: free_text(row, "error")?,
        log: free_text(row, "log")?,
        started_at: row.opt_int("started_at")?,
        ended_at: row.int("ended_at")?,
    })
}

pub(crate) fn token(row: &impl RowExt) -> Result<Token, StoreError> {
    let role = row.text("role")?;
    let lambdas = row.text("lambdas")?;
    Ok(Token {
        id: row.text("id")?,
        name: crate::support::text_out(row.text("name")?),
        role: role
            .parse()
            .map_err(|_| StoreError::Corrupt(format!("token role {role:?}")))?,
        lambdas: serde_json::from_str(&lambdas)
            .map_err(|e| StoreError::Corrupt(format!("token lambdas {lambdas:?}: {e}")))?,
        created_at: row.int("created_at")?,
        revoked_at: row.opt_int("revoked_at")?,
    })
}

/// The names each state column may hold, by the latest migration that
/// checks it (0014, or one after that adds a state), are exactly the names
/// these rows decode: the model's enums. A variant added to an enum fails
/// here until a migration pair lets the databases hold it.
#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use waft_core::TaskStatus;

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
    fn outcomes() -> [AttemptOutcome; 4] {
        use AttemptOutcome::*;
        let all = [Success, Retriable, Fatal, Lost];
        for outcome in all {
            match outcome {
                Success | Retriable | Fatal | Lost => {}
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
            ];
            for (column, names) in expected {
                assert_eq!(latest_check(migrator, column), names, "{backend}: {column}");
            }
        }
    }
}
