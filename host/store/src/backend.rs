//! The SQL both backends share, written once.
//!
//! SQLite and Postgres run the same statements here: `$N` parameters,
//! `RETURNING`, `ON CONFLICT`, `TRUE`/`FALSE` and BIGINT casts mean the same
//! in both. What differs stays in each backend's module: how a writing
//! transaction begins, the row locks of the consumer's poll, and the two
//! spellings of "the rows of a JSON array" and "bytes from hex". The macro
//! stamps the shared code out for each backend's connection and row types.
//!
//! The hot paths (insert, poll, claim, heartbeat, result) are one statement
//! per batch: the batch travels as one JSON array parameter and is joined to
//! `tasks` by primary key. A statement per row was a round trip per row,
//! even to SQLite's worker thread: three to ten times slower.

macro_rules! sql_task_store {
    (
        store: $store:ty,
        connection: $conn:ty,
        row: $row:ty,
        // Appended to the poll's SELECT: Postgres's `FOR UPDATE ... SKIP
        // LOCKED`, so concurrent consumers take different tasks.
        poll_lock: $poll_lock:expr,
        // Appended to a SELECT of one row the transaction will update:
        // Postgres's `FOR UPDATE`, so concurrent consumers take turns.
        row_lock: $row_lock:expr,
        // The rows of the JSON array bound as `$1`, as a table `j` with a
        // column `value` holding each element.
        json_rows: $json_rows:expr,
        // Decodes hex text (`{}`) into bytes.
        unhex: $unhex:expr,
        // A statement run first by every transaction that reads gates to
        // act on tasks (the poll, claims), and one run first by a gate
        // change: Postgres's shared and exclusive advisory locks, so a
        // gate change never interleaves with a poll or claim that read the
        // gate before it (a resume would miss the tasks such a poll holds).
        gate_read_lock: $gate_read_lock:expr,
        gate_write_lock: $gate_write_lock:expr,
        // Selects the database server's clock, in Unix milliseconds.
        clock: $clock:expr $(,)?
    ) => {
        use std::collections::HashMap;

        use async_trait::async_trait;
        use waft_core::task::{check_collection_name, check_lambda_name};
        use waft_core::{LambdaConfig, TaskStatus};

        use $crate::rows::{self, LAMBDA_COLUMNS, RowExt, CRON_COLUMNS, TASK_COLUMNS};
        use $crate::rules::{Admitted, GateEffect, Origin, RetryPlan, admit};
        use $crate::support::{millis, new_id, sql, text_in};
        use $crate::{
            Attempt, Backlog, ClaimedTask, DeadRedrive, DeadSelector, EnqueueReport, EnqueuedTask, Gate, GateSet,
            GateState, GcReport, Lambda, LambdaDeploy, LambdaGc, LambdaRollback, Materialized, Millis, NewTask, Refusal, Result, ResultOutcome, Cron,
            CronMaterialize, StoreError, Task, Token, TokenCreate, TokenRole, TaskClaimMany, TaskEnqueueReady,
            TaskHeartbeatMany, TaskInsertMany, TaskInserted, TaskList, TaskSetResultMany, TaskStore,
        };

        $crate::rows::impl_row_ext!($row);

        /// 2 when a drop gate covers task `t`, 1 for a pause gate, else 0 or NULL.
        const GATE_OF_TASK: &str = "(SELECT CAST(MAX(CASE g.state WHEN 'dropped' THEN 2 WHEN 'paused' THEN 1 ELSE 0 END) AS BIGINT) \
             FROM gates g WHERE g.lambda = t.lambda AND (g.collection = '' OR g.collection = t.collection))";

        /// Statuses of tasks that have not ended, for SQL lists.
        const UNFINISHED: &str = "('new', 'enqueued', 'claimed', 'processing', 'retriable_failure')";

        /// Runs a dialect's lock statement, if it has one.
        async fn lock_gates(conn: &mut $conn, statement: &'static str) -> Result<()> {
            if !statement.is_empty() {
                sqlx::query(statement).execute(&mut *conn).await?;
            }
            Ok(())
        }

        async fn lambda_current(conn: &mut $conn, name: &str) -> Result<Option<Lambda>> {
            let row = sqlx::query(sql(format!(
                "SELECT {LAMBDA_COLUMNS} FROM lambdas l JOIN lambda_versions v \
                 ON v.lambda = l.name AND v.version = l.current_version WHERE l.name = $1"
            )))
            .bind(text_in(name))
            .fetch_optional(&mut *conn)
            .await?;
            row.as_ref().map(rows::lambda).transpose()
        }

        async fn require_lambda(conn: &mut $conn, name: &str) -> Result<Lambda> {
            lambda_current(conn, name)
                .await?
                .ok_or_else(|| StoreError::UnknownLambda(name.to_owned()))
        }

        /// A lambda at its current version, read once per insert.
        async fn cached_lambda(
            conn: &mut $conn,
            lambdas: &mut HashMap<String, Lambda>,
            name: &str,
        ) -> Result<Lambda> {
            if let Some(lambda) = lambdas.get(name) {
                return Ok(lambda.clone());
            }
            let lambda = require_lambda(conn, name).await?;
            lambdas.insert(name.to_owned(), lambda.clone());
            Ok(lambda)
        }

        async fn require_version(conn: &mut $conn, lambda: &str, version: u32) -> Result<()> {
            let found: Option<i64> = sqlx::query_scalar(
                "SELECT version FROM lambda_versions WHERE lambda = $1 AND version = $2",
            )
            .bind(lambda)
            .bind(i64::from(version))
            .fetch_optional(&mut *conn)
            .await?;
            match found {
                Some(_) => Ok(()),
                None => Err(StoreError::UnknownVersion { lambda: lambda.to_owned(), version }),
            }
        }

        /// Checks tasks against their lambdas and inserts them in one
        /// statement; `cron_id` links tasks made by a periodic schedule.
        async fn insert_tasks(
            conn: &mut $conn,
            tasks: Vec<NewTask>,
            cron_id: Option<&str>,
            origin: Origin,
            now: Millis,
        ) -> Result<Vec<TaskInserted>> {
            let mut lambdas: HashMap<String, Lambda> = HashMap::new();
            let mut keys: HashMap<(String, String), String> = HashMap::new();
            let mut answers = Vec::with_capacity(tasks.len());
            let mut rows = Vec::with_capacity(tasks.len());
            for task in tasks {
                check_lambda_name(&task.lambda)?;
                let lambda = cached_lambda(conn, &mut lambdas, &task.lambda).await?;
                let config = &lambda.config;
                let Admitted { collection, priority, run_at } = admit(&task, &lambda, origin, now)?;
                if let Some(version) = task.version {
                    require_version(conn, &task.lambda, version).await?;
                }
                if let Some(key) = &task.idempotency_key {
                    let slot = (task.lambda.clone(), key.clone());
                    if let Some(id) = keys.get(&slot) {
                        answers.push(TaskInserted { id: id.clone(), created: false });
                        continue;
                    }
                    let existing: Option<String> = sqlx::query_scalar(
                        "SELECT id FROM tasks WHERE lambda = $1 AND idempotency_key = $2",
                    )
                    .bind(&task.lambda)
                    .bind(text_in(key))
                    .fetch_optional(&mut *conn)
                    .await?;
                    if let Some(id) = existing {
                        answers.push(TaskInserted { id, created: false });
                        continue;
                    }
                }
                if let Some(parent) = &task.parent_id {
                    let row = sqlx::query("SELECT lambda, status, lease_token FROM tasks WHERE id = $1")
                        .bind(text_in(parent))
                        .fetch_optional(&mut *conn)
                        .await?
                        .ok_or_else(|| StoreError::Invalid(format!("unknown parent task {parent}")))?;
                    if let Some(lease) = task.parent_lease {
                        let running = matches!(
                            rows::status(&row)?,
                            TaskStatus::Claimed | TaskStatus::Processing
                        );
                        if !running || row.int("lease_token")? != lease {
                            return Err(StoreError::ParentLeaseLost { parent: parent.clone(), lease });
                        }
                        // An execution schedules children of its own lambda,
                        // and of those its lambda's current version names.
                        let parent_lambda = row.text("lambda")?;
                        if parent_lambda != task.lambda
                            && !cached_lambda(conn, &mut lambdas, &parent_lambda)
                                .await?
                                .config
                                .allows_child(&parent_lambda, &task.lambda)
                        {
                            return Err(StoreError::ChildNotAllowed {
                                parent_lambda,
                                child_lambda: task.lambda.clone(),
                            });
                        }
                    }
                } else if task.parent_lease.is_some() {
                    return Err(StoreError::Invalid("a parent lease needs a parent task".into()));
                }
                let continuation = match &task.continuation {
                    None => None,
                    Some(then) => {
                        check_lambda_name(&then.lambda)?;
                        if let Some(collection) = &then.collection {
                            check_collection_name(collection)?;
                        }
                        let next = require_lambda(conn, &then.lambda).await?;
                        if let Some(priority) = then.priority
                            && priority >= next.config.priorities
                        {
                            return Err(StoreError::InvalidPriority {
                                lambda: next.name,
                                priority,
                                max: next.config.priorities - 1,
                            });
                        }
                        Some(serde_json::to_string(then).map_err(|e| StoreError::Invalid(e.to_string()))?)
                    }
                };
                let id = new_id();
                if let Some(key) = &task.idempotency_key {
                    keys.insert((task.lambda.clone(), key.clone()), id.clone());
                }
                rows.push(serde_json::json!({
                    "id": id,
                    "lambda": task.lambda,
                    "collection": collection,
                    "priority": priority,
                    "payload": hex::encode(&task.payload),
                    "max_attempts": config.max_attempts,
                    "run_at": run_at,
                    "parent_id": task.parent_id,
                    "key": task.idempotency_key.as_deref().map(text_in),
                    "version": task.version,
                    "continuation": continuation,
                }));
                answers.push(TaskInserted { id, created: true });
            }
            if !rows.is_empty() {
                // A task with the same idempotency key committed by another
                // transaction since the lookup above is skipped here (no
                // error) and answered with that task below.
                let created: Vec<String> = sqlx::query_scalar(sql(format!(
                    "INSERT INTO tasks (id, lambda, collection, priority, payload, status, \
                     max_attempts, scheduled_at, due_at, next_trigger_at, created_at, parent_id, \
                     idempotency_key, schedule_id, version, continuation) \
                     SELECT j.value->>'id', j.value->>'lambda', j.value->>'collection', \
                     CAST(j.value->>'priority' AS BIGINT), {payload}, 'new', \
                     CAST(j.value->>'max_attempts' AS BIGINT), CAST(j.value->>'run_at' AS BIGINT), \
                     CAST(j.value->>'run_at' AS BIGINT), CAST(j.value->>'run_at' AS BIGINT), $2, \
                     j.value->>'parent_id', j.value->>'key', $3, CAST(j.value->>'version' AS BIGINT), \
                     j.value->>'continuation' FROM {rows} WHERE TRUE \
                     ON CONFLICT (lambda, idempotency_key) WHERE idempotency_key IS NOT NULL \
                     DO NOTHING RETURNING id",
                    payload = unhex("j.value->>'payload'"),
                    rows = $json_rows,
                )))
                .bind(serde_json::Value::Array(rows).to_string())
                .bind(now)
                .bind(cron_id)
                .fetch_all(&mut *conn)
                .await?;
                if created.len() != answers.iter().filter(|a| a.created).count() {
                    let created: std::collections::HashSet<String> = created.into_iter().collect();
                    for ((lambda, key), id) in &keys {
                        if created.contains(id) {
                            continue;
                        }
                        let winner: String = sqlx::query_scalar(
                            "SELECT id FROM tasks WHERE lambda = $1 AND idempotency_key = $2",
                        )
                        .bind(lambda)
                        .bind(text_in(key))
                        .fetch_one(&mut *conn)
                        .await?;
                        for answer in answers.iter_mut().filter(|a| &a.id == id) {
                            *answer = TaskInserted { id: winner.clone(), created: false };
                        }
                    }
                }
            }
            Ok(answers)
        }

        /// SQL that decodes the hex text `expression` into bytes.
        fn unhex(expression: &str) -> String {
            $unhex.replace("{}", expression)
        }

        /// Explains why a lease-guarded update touched no row.
        async fn lease_refusal(conn: &mut $conn, id: &str, lease: i64) -> Result<Refusal> {
            let row = sqlx::query("SELECT status, lease_token FROM tasks WHERE id = $1")
                .bind(text_in(id))
                .fetch_optional(&mut *conn)
                .await?;
            Ok(match row {
                None => Refusal::NotFound,
                Some(row) => {
                    let current = row.int("lease_token")?;
                    if current != lease {
                        Refusal::StaleLease { current }
                    } else {
                        Refusal::WrongState(rows::status(&row)?)
                    }
                }
            })
        }

        #[async_trait]
        impl TaskStore for $store {
            async fn clock_now(&self) -> Result<Millis> {
                let mut conn = self.pool.acquire().await?;
                Ok(sqlx::query_scalar($clock).fetch_one(&mut *conn).await?)
            }

            async fn lambda_deploy(&self, params: LambdaDeploy) -> Result<Lambda> {
                check_lambda_name(&params.name)?;
                params.config.validate()?;
                let mut tx = self.write().await?;
                sqlx::query(
                    "INSERT INTO components (digest, bytes, created_at) VALUES ($1, $2, $3) \
                     ON CONFLICT (digest) DO NOTHING",
                )
                .bind(&params.digest)
                .bind(&params.component)
                .bind(params.now)
                .execute(&mut *tx)
                .await?;
                let version: i64 = sqlx::query_scalar(
                    "INSERT INTO lambdas (name, current_version, created_at) VALUES ($1, 1, $2) \
                     ON CONFLICT (name) DO UPDATE SET current_version = lambdas.current_version + 1 \
                     RETURNING current_version",
                )
                .bind(&params.name)
                .bind(params.now)
                .fetch_one(&mut *tx)
                .await?;
                insert_version(&mut tx, &params, version).await?;
                repace(&mut tx, &params.name, params.now).await?;
                let lambda = require_lambda(&mut tx, &params.name).await?;
                tx.commit().await?;
                Ok(lambda)
            }

            async fn lambda_get(&self, name: &str) -> Result<Option<Lambda>> {
                let mut conn = self.pool.acquire().await?;
                lambda_current(&mut conn, name).await
            }

            async fn lambda_get_version(&self, name: &str, version: u32) -> Result<Option<Lambda>> {
                let row = sqlx::query(sql(format!(
                    "SELECT {LAMBDA_COLUMNS} FROM lambdas l JOIN lambda_versions v \
                     ON v.lambda = l.name WHERE l.name = $1 AND v.version = $2"
                )))
                .bind(text_in(name))
                .bind(i64::from(version))
                .fetch_optional(&self.pool)
                .await?;
                row.as_ref().map(rows::lambda).transpose()
            }

            async fn lambda_list(&self) -> Result<Vec<Lambda>> {
                let rows = sqlx::query(sql(format!(
                    "SELECT {LAMBDA_COLUMNS} FROM lambdas l JOIN lambda_versions v \
                     ON v.lambda = l.name AND v.version = l.current_version ORDER BY l.name"
                )))
                .fetch_all(&self.pool)
                .await?;
                rows.iter().map(rows::lambda).collect()
            }

            async fn lambda_versions(&self, name: &str) -> Result<Vec<Lambda>> {
                let rows = sqlx::query(sql(format!(
                    "SELECT {LAMBDA_COLUMNS} FROM lambdas l JOIN lambda_versions v \
                     ON v.lambda = l.name WHERE l.name = $1 ORDER BY v.version"
                )))
                .bind(text_in(name))
                .fetch_all(&self.pool)
                .await?;
                if rows.is_empty() {
                    return Err(StoreError::UnknownLambda(name.to_owned()));
                }
                rows.iter().map(rows::lambda).collect()
            }

            async fn lambda_rollback(&self, params: LambdaRollback) -> Result<Lambda> {
                check_lambda_name(&params.name)?;
                let mut tx = self.write().await?;
                let current = require_lambda(&mut tx, &params.name).await?;
                let to = params.to.unwrap_or(current.version.saturating_sub(1));
                if to == current.version {
                    return Err(StoreError::Invalid(format!(
                        "version {to} of {:?} is already current", params.name
                    )));
                }
                let row = sqlx::query(sql(format!(
                    "SELECT {LAMBDA_COLUMNS} FROM lambdas l JOIN lambda_versions v \
                     ON v.lambda = l.name WHERE l.name = $1 AND v.version = $2"
                )))
                .bind(&params.name)
                .bind(i64::from(to))
                .fetch_optional(&mut *tx)
                .await?;
                let target = row
                    .as_ref()
                    .map(rows::lambda)
                    .transpose()?
                    .ok_or_else(|| StoreError::UnknownVersion { lambda: params.name.clone(), version: to })?;
                let version: i64 = sqlx::query_scalar(
                    "UPDATE lambdas SET current_version = current_version + 1 WHERE name = $1 \
                     RETURNING current_version",
                )
                .bind(&params.name)
                .fetch_one(&mut *tx)
                .await?;
                let copy = LambdaDeploy {
                    name: params.name.clone(),
                    digest: target.digest,
                    component: Vec::new(),
                    config: target.config,
                    now: params.now,
                };
                insert_version(&mut tx, &copy, version).await?;
                repace(&mut tx, &params.name, params.now).await?;
                let lambda = require_lambda(&mut tx, &params.name).await?;
                tx.commit().await?;
                Ok(lambda)
            }

            async fn lambda_gc(&self, params: LambdaGc) -> Result<GcReport> {
                let keep = i64::from(params.keep.max(1));
                let mut tx = self.write().await?;
                // Older than the newest `keep`, not current, and not pinned
                // by a task that may still run (a dead one may be redriven).
                let versions = sqlx::query(
                    "DELETE FROM lambda_versions WHERE lambda = $1 \
                     AND version <= (SELECT current_version FROM lambdas WHERE name = $1) - $2 \
                     AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.lambda = lambda_versions.lambda \
                        AND t.version = lambda_versions.version \
                        AND t.status NOT IN ('success', 'fatal_failure', 'dropped', 'cancelled'))",
                )
                .bind(&params.lambda)
                .bind(keep)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                let components = sqlx::query(
                    "DELETE FROM components WHERE NOT EXISTS \
                     (SELECT 1 FROM lambda_versions v WHERE v.digest = components.digest)",
                )
                .execute(&mut *tx)
                .await?
                .rows_affected();
                tx.commit().await?;
                Ok(GcReport { versions, components })
            }

            async fn component_get(&self, digest: &str) -> Result<Option<Vec<u8>>> {
                Ok(
                    sqlx::query_scalar("SELECT bytes FROM components WHERE digest = $1")
                        .bind(text_in(digest))
                        .fetch_optional(&self.pool)
                        .await?,
                )
            }

            async fn task_insert_many(&self, params: TaskInsertMany) -> Result<Vec<TaskInserted>> {
                let mut tx = self.write().await?;
                let inserted =
                    insert_tasks(&mut tx, params.tasks, None, Origin::Client, params.now).await?;
                tx.commit().await?;
                Ok(inserted)
            }

            async fn task_get(&self, id: &str) -> Result<Option<Task>> {
                let row = sqlx::query(sql(format!(
                    "SELECT {TASK_COLUMNS} FROM tasks WHERE id = $1"
                )))
                .bind(text_in(id))
                .fetch_optional(&self.pool)
                .await?;
                row.as_ref().map(rows::task).transpose()
            }

            async fn task_list(&self, params: TaskList) -> Result<Vec<Task>> {
                let limit = match params.limit {
                    0 => 100,
                    n => n.min(1000),
                };
                let rows = sqlx::query(sql(format!(
                    "SELECT {TASK_COLUMNS} FROM tasks WHERE \
                     ($1 IS NULL OR lambda = $1) AND ($2 IS NULL OR collection = $2) \
                     AND ($3 IS NULL OR status = $3) AND ($4 IS NULL OR parent_id = $4) \
                     AND ($5 IS NULL OR id > $5) ORDER BY id LIMIT $6"
                )))
                .bind(params.lambda.as_deref().map(text_in))
                .bind(params.collection.as_deref().map(text_in))
                .bind(params.status.map(TaskStatus::as_str))
                .bind(params.parent_id.as_deref().map(text_in))
                .bind(params.after.as_deref().map(text_in))
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await?;
                rows.iter().map(rows::task).collect()
            }

            async fn task_cancel(&self, id: &str, now: Millis) -> Result<Task> {
                let mut tx = self.write().await?;
                // Locked, and the update guarded too: a result committing
                // meanwhile either ends the task first (and the cancel is
                // refused) or waits, and is then refused itself.
                let row = sqlx::query(sql(format!(
                    "SELECT status FROM tasks WHERE id = $1 {}",
                    $row_lock
                )))
                .bind(text_in(id))
                .fetch_optional(&mut *tx)
                .await?
                .ok_or_else(|| StoreError::TaskNotFound(id.to_owned()))?;
                let status = rows::status(&row)?;
                if status.is_terminal() {
                    return Err(StoreError::AlreadyEnded {
                        id: id.to_owned(),
                        status,
                    });
                }
                let row = sqlx::query(sql(format!(
                    "UPDATE tasks SET status = 'cancelled', next_trigger_at = NULL, held = FALSE, \
                     finished_at = $2 WHERE id = $1 AND status IN {UNFINISHED} RETURNING {TASK_COLUMNS}"
                )))
                .bind(id)
                .bind(now)
                .fetch_optional(&mut *tx)
                .await?
                .ok_or_else(|| StoreError::Corrupt(format!("task {id} ended under a row lock")))?;
                let task = rows::task(&row)?;
                tx.commit().await?;
                Ok(task)
            }

            async fn task_enqueue_ready(&self, params: TaskEnqueueReady) -> Result<EnqueueReport> {
                let now = params.now;
                let mut tx = self.write().await?;
                lock_gates(&mut tx, $gate_read_lock).await?;
                let due = sqlx::query(sql(format!(
                    "SELECT t.id, t.lambda, t.status, t.attempt, t.max_attempts, t.paced, \
                     t.lease_token, {GATE_OF_TASK} AS gate \
                     FROM tasks t WHERE t.next_trigger_at IS NOT NULL AND t.next_trigger_at <= $1 \
                     ORDER BY t.next_trigger_at LIMIT $2 {}",
                    $poll_lock
                )))
                .bind(now)
                .bind(i64::from(params.limit))
                .fetch_all(&mut *tx)
                .await?;
                let mut report = EnqueueReport::default();
                let mut to_enqueue = Vec::with_capacity(due.len());
                let mut lost = Vec::new();
                for row in &due {
                    let id = row.text("id")?;
                    let status = rows::status(row)?;
                    let gate = GateEffect::from_code(row.opt_int("gate")?);
                    let attempt = row.int("attempt")?;
                    // An execution whose claim or heartbeat lapsed may have
                    // run (a poison task crashes its executor before its
                    // first heartbeat): it is an attempt, lost.
                    let lapsed = match status {
                        TaskStatus::Claimed => Some("the execution never reported: no heartbeat within the claim timeout"),
                        TaskStatus::Processing => Some("the executor stopped heartbeating"),
                        TaskStatus::New
                        | TaskStatus::Enqueued
                        | TaskStatus::RetriableFailure
                        | TaskStatus::Success
                        | TaskStatus::FatalFailure
                        | TaskStatus::Dead
                        | TaskStatus::Dropped
                        | TaskStatus::Cancelled => None,
                    };
                    if let Some(why) = lapsed {
                        let last = attempt >= row.int("max_attempts")?;
                        let error = if last {
                            format!("{why} on attempt {attempt}, the last one")
                        } else {
                            why.to_owned()
                        };
                        lost.push(serde_json::json!({
                            "id": id, "lease": row.int("lease_token")?, "outcome": "lost", "error": error,
                        }));
                        if last && gate != GateEffect::Drop {
                            sqlx::query(
                                "UPDATE tasks SET status = 'dead', next_trigger_at = NULL, held = FALSE, \
                                 finished_at = $2, last_error = $3 WHERE id = $1",
                            )
                            .bind(&id)
                            .bind(now)
                            .bind(text_in(&error))
                            .execute(&mut *tx)
                            .await?;
                            report.dead += 1;
                            continue;
                        }
                    }
                    match gate {
                        GateEffect::Drop => {
                            drop_task(&mut tx, &id, now, "").await?;
                            report.dropped += 1;
                        }
                        GateEffect::Hold => {
                            hold(&mut tx, &id, lapsed, "").await?;
                            report.held += 1;
                        }
                        GateEffect::Open => {
                            to_enqueue.push((id, row.text("lambda")?, row.flag("paced")?, lapsed));
                        }
                    }
                }
                record_attempts(&mut tx, lost, now).await?;
                let to_enqueue = pace(&mut tx, to_enqueue, now, &mut report).await?;
                if !to_enqueue.is_empty() {
                    // One statement for the common case.
                    let ids: Vec<_> = to_enqueue
                        .iter()
                        .map(|(id, lapsed)| serde_json::json!({ "id": id, "error": lapsed }))
                        .collect();
                    let rows = sqlx::query(sql(format!(
                        "UPDATE tasks SET status = 'enqueued', enqueue_token = enqueue_token + 1, \
                         enqueued_at = $2, next_trigger_at = $3, paced = FALSE, \
                         last_error = COALESCE(d.due_error, last_error) \
                         FROM (SELECT j.value->>'id' AS due_id, j.value->>'error' AS due_error FROM {}) AS d \
                         WHERE tasks.id = d.due_id \
                         RETURNING id, lambda, priority, enqueue_token",
                        $json_rows
                    )))
                    .bind(serde_json::Value::Array(ids).to_string())
                    .bind(now)
                    .bind(now.saturating_add(millis(params.enqueue_timeout)))
                    .fetch_all(&mut *tx)
                    .await?;
                    let mut by_id = HashMap::with_capacity(rows.len());
                    for row in &rows {
                        by_id.insert(
                            row.text("id")?,
                            (
                                row.text("lambda")?,
                                u8::try_from(row.int("priority")?)
                                    .map_err(|_| StoreError::Corrupt("priority".into()))?,
                                row.int("enqueue_token")?,
                            ),
                        );
                    }
                    // In due order, as the poll found them.
                    for (id, _) in to_enqueue {
                        let (lambda, priority, enqueue_token) = by_id
                            .remove(&id)
                            .ok_or_else(|| StoreError::Corrupt(format!("task {id} vanished")))?;
                        report.enqueued.push(EnqueuedTask { id, lambda, priority, enqueue_token });
                    }
                }
                tx.commit().await?;
                Ok(report)
            }

            async fn task_claim_many(
                &self,
                params: TaskClaimMany,
            ) -> Result<Vec<Result<ClaimedTask, Refusal>>> {
                let mut tx = self.write().await?;
                lock_gates(&mut tx, $gate_read_lock).await?;
                let claims: Vec<_> = params
                    .claims
                    .iter()
                    .map(|(id, token)| serde_json::json!({ "id": text_in(id), "token": token }))
                    .collect();
                // `(status = ...) = TRUE` keeps SQLite from driving the update
                // from the status index (a scan of every enqueued task per
                // batch row); both databases then join on the primary key.
                let rows = sqlx::query(sql(format!(
                    "UPDATE tasks SET status = 'claimed', lease_token = lease_token + 1, \
                     attempt = attempt + 1, claimed_at = $2, next_trigger_at = $3, progress = NULL \
                     FROM (SELECT j.value->>'id' AS claim_id, CAST(j.value->>'token' AS BIGINT) \
                        AS claim_token FROM {}) AS c \
                     WHERE tasks.id = c.claim_id AND tasks.enqueue_token = c.claim_token \
                     AND (tasks.status = 'enqueued') = TRUE AND tasks.held = FALSE \
                     AND NOT EXISTS (SELECT 1 FROM gates g WHERE g.lambda = tasks.lambda \
                        AND (g.collection = '' OR g.collection = tasks.collection)) \
                     RETURNING id, lambda, collection, priority, payload, attempt, scheduled_at, \
                     lease_token, COALESCE(tasks.version, \
                        (SELECT current_version FROM lambdas WHERE name = tasks.lambda)) AS lambda_version",
                    $json_rows
                )))
                .bind(serde_json::Value::Array(claims).to_string())
                .bind(params.now)
                .bind(params.now.saturating_add(millis(params.claim_timeout)))
                .fetch_all(&mut *tx)
                .await?;
                let mut won = HashMap::with_capacity(rows.len());
                for row in &rows {
                    let task = claimed(row)?;
                    won.insert(task.id.clone(), task);
                }
                let mut answers = Vec::with_capacity(params.claims.len());
                for (id, _) in &params.claims {
                    answers.push(match won.remove(id) {
                        Some(task) => Ok(task),
                        None => Err(claim_refusal(&mut tx, id, params.now).await?),
                    });
                }
                tx.commit().await?;
                Ok(answers)
            }

            async fn task_heartbeat_many(
                &self,
                params: TaskHeartbeatMany,
            ) -> Result<Vec<Result<(), Refusal>>> {
                let mut tx = self.write().await?;
                let beats: Vec<_> = params
                    .beats
                    .iter()
                    .map(|b| serde_json::json!({
                        "id": text_in(&b.id),
                        "lease": b.lease_token,
                        "progress": b.progress.as_deref().map(text_in),
                    }))
                    .collect();
                // See the claim for why the status test is written this way.
                let alive: Vec<String> = sqlx::query_scalar(sql(format!(
                    "UPDATE tasks SET status = 'processing', heartbeat_at = $2, next_trigger_at = $3, \
                     progress = COALESCE(b.beat_progress, progress) \
                     FROM (SELECT j.value->>'id' AS beat_id, CAST(j.value->>'lease' AS BIGINT) \
                        AS beat_lease, j.value->>'progress' AS beat_progress FROM {}) AS b \
                     WHERE tasks.id = b.beat_id AND tasks.lease_token = b.beat_lease \
                     AND (tasks.status IN ('claimed', 'processing')) = TRUE RETURNING id",
                    $json_rows
                )))
                .bind(serde_json::Value::Array(beats).to_string())
                .bind(params.now)
                .bind(params.now.saturating_add(millis(params.heartbeat_timeout)))
                .fetch_all(&mut *tx)
                .await?;
                let alive: std::collections::HashSet<String> = alive.into_iter().collect();
                let mut answers = Vec::with_capacity(params.beats.len());
                for beat in &params.beats {
                    answers.push(if alive.contains(&beat.id) {
                        Ok(())
                    } else {
                        Err(lease_refusal(&mut tx, &beat.id, beat.lease_token).await?)
                    });
                }
                tx.commit().await?;
                Ok(answers)
            }

            async fn task_set_result_many(
                &self,
                params: TaskSetResultMany,
            ) -> Result<Vec<Result<TaskStatus, Refusal>>> {
                let now = params.now;
                let mut tx = self.write().await?;
                let mut answers: Vec<Option<Result<TaskStatus, Refusal>>> =
                    vec![None; params.results.len()];
                let mut finals = Vec::new();
                let mut retries = Vec::new();
                // A second result for one task in one batch is judged after
                // the first has ended it.
                let mut repeats = Vec::new();
                let mut seen = std::collections::HashSet::new();
                // The executions that ended, for the attempts table.
                let mut history = Vec::new();
                for (index, result) in params.results.into_iter().enumerate() {
                    if !seen.insert(result.id.clone()) {
                        repeats.push((index, result.id, result.lease_token));
                        continue;
                    }
                    let log = result.log;
                    match result.outcome {
                        ResultOutcome::Success { output } => finals.push((index, result.id, result.lease_token, TaskStatus::Success, output, None, log)),
                        ResultOutcome::Fatal { error } => finals.push((index, result.id, result.lease_token, TaskStatus::FatalFailure, None, Some(error), log)),
                        ResultOutcome::Retriable { error, retry_after } => {
                            retries.push((index, result.id, result.lease_token, error, retry_after, log))
                        }
                    }
                }

                // Success and fatal failure need nothing from the task: one
                // guarded update ends them all.
                if !finals.is_empty() {
                    let rows: Vec<_> = finals
                        .iter()
                        .map(|(_, id, lease, status, output, error, log)| serde_json::json!({
                            "id": text_in(id),
                            "lease": lease,
                            "status": status.as_str(),
                            "output": output.as_ref().map(hex::encode),
                            "error": error.as_deref().map(text_in),
                            "log": log.as_deref().map(text_in),
                        }))
                        .collect();
                    // A success with a continuation also answers what the next
                    // task needs, so tasks without one cost no second query.
                    let ended = sqlx::query(sql(format!(
                        "UPDATE tasks SET status = r.result_status, output = {output}, \
                         last_error = r.result_error, log = r.result_log, next_trigger_at = NULL, \
                         held = FALSE, finished_at = $2 \
                         FROM (SELECT j.value->>'id' AS result_id, \
                            CAST(j.value->>'lease' AS BIGINT) AS result_lease, \
                            j.value->>'status' AS result_status, j.value->>'output' AS result_output, \
                            j.value->>'error' AS result_error, j.value->>'log' AS result_log \
                            FROM {rows}) AS r \
                         WHERE tasks.id = r.result_id AND tasks.lease_token = r.result_lease \
                         AND (tasks.status IN ('claimed', 'processing')) = TRUE \
                         RETURNING id, CASE WHEN status = 'success' THEN continuation END AS continuation, \
                         CASE WHEN status = 'success' AND continuation IS NOT NULL THEN output END AS next_payload",
                        output = unhex("r.result_output"),
                        rows = $json_rows,
                    )))
                    .bind(serde_json::Value::Array(rows).to_string())
                    .bind(now)
                    .fetch_all(&mut *tx)
                    .await?;
                    let mut continued = Vec::new();
                    let mut ids = std::collections::HashSet::with_capacity(ended.len());
                    for row in &ended {
                        let id = row.text("id")?;
                        if let Some(then) = row.opt_text("continuation")? {
                            continued.push((id.clone(), then, row.opt_bytes("next_payload")?));
                        }
                        ids.insert(id);
                    }
                    let ended = ids;
                    continue_successes(&mut tx, continued, now).await?;
                    for (index, id, lease, status, _, error, log) in finals {
                        answers[index] = Some(if ended.contains(&id) {
                            let outcome = if status == TaskStatus::Success { "success" } else { "fatal" };
                            history.push(serde_json::json!({
                                "id": id, "lease": lease, "outcome": outcome, "error": error, "log": log,
                            }));
                            Ok(status)
                        } else {
                            Err(lease_refusal(&mut tx, &id, lease).await?)
                        });
                    }
                }

                // Retries depend on the attempts left and the lambda's backoff,
                // read first; the update is guarded like the others, so a
                // cancel or a lapse committed since the read wins, and the
                // result is refused.
                let mut updates = Vec::with_capacity(retries.len());
                let mut planned = Vec::with_capacity(retries.len());
                for (index, id, lease, error, retry_after, log) in retries {
                    let row = sqlx::query(
                        "SELECT t.status, t.lease_token, t.attempt, t.max_attempts, \
                         v.backoff_base_ms, v.backoff_factor, v.backoff_max_ms FROM tasks t \
                         JOIN lambdas l ON l.name = t.lambda \
                         JOIN lambda_versions v ON v.lambda = l.name AND v.version = l.current_version \
                         WHERE t.id = $1",
                    )
                    .bind(text_in(&id))
                    .fetch_optional(&mut *tx)
                    .await?;
                    let Some(row) = row else {
                        answers[index] = Some(Err(Refusal::NotFound));
                        continue;
                    };
                    let status = rows::status(&row)?;
                    let current = row.int("lease_token")?;
                    if current != lease {
                        answers[index] = Some(Err(Refusal::StaleLease { current }));
                        continue;
                    }
                    if !matches!(status, TaskStatus::Claimed | TaskStatus::Processing) {
                        answers[index] = Some(Err(Refusal::WrongState(status)));
                        continue;
                    }
                    let plan = RetryPlan::decide(
                        row.int("attempt")?,
                        row.int("max_attempts")?,
                        &rows::backoff(&row)?,
                        retry_after,
                        now,
                        fastrand::f64(),
                    );
                    updates.push(serde_json::json!({
                        "id": id,
                        "lease": lease,
                        "status": plan.status.as_str(),
                        "error": text_in(&error),
                        "log": log.as_deref().map(text_in),
                        "next": plan.next_trigger_at,
                        "finished": plan.finished_at,
                    }));
                    planned.push((index, id, lease, plan.status, error, log));
                }
                if !updates.is_empty() {
                    let updated: Vec<String> = sqlx::query_scalar(sql(format!(
                        "UPDATE tasks SET status = r.result_status, last_error = r.result_error, \
                         log = r.result_log, next_trigger_at = r.result_next, due_at = COALESCE(r.result_next, due_at), \
                         held = FALSE, finished_at = r.result_finished \
                         FROM (SELECT j.value->>'id' AS result_id, \
                            CAST(j.value->>'lease' AS BIGINT) AS result_lease, \
                            j.value->>'status' AS result_status, j.value->>'error' AS result_error, \
                            j.value->>'log' AS result_log, CAST(j.value->>'next' AS BIGINT) AS result_next, \
                            CAST(j.value->>'finished' AS BIGINT) AS result_finished FROM {}) AS r \
                         WHERE tasks.id = r.result_id AND tasks.lease_token = r.result_lease \
                         AND (tasks.status IN ('claimed', 'processing')) = TRUE RETURNING id",
                        $json_rows,
                    )))
                    .bind(serde_json::Value::Array(updates).to_string())
                    .fetch_all(&mut *tx)
                    .await?;
                    let updated: std::collections::HashSet<String> = updated.into_iter().collect();
                    for (index, id, lease, status, error, log) in planned {
                        answers[index] = Some(if updated.contains(&id) {
                            history.push(serde_json::json!({
                                "id": id, "lease": lease, "outcome": "retriable", "error": error, "log": log,
                            }));
                            Ok(status)
                        } else {
                            Err(lease_refusal(&mut tx, &id, lease).await?)
                        });
                    }
                }
                record_attempts(&mut tx, history, now).await?;
                for (index, id, lease) in repeats {
                    answers[index] = Some(Err(lease_refusal(&mut tx, &id, lease).await?));
                }
                tx.commit().await?;
                answers
                    .into_iter()
                    .map(|answer| answer.ok_or_else(|| StoreError::Corrupt("a result went unanswered".into())))
                    .collect()
            }

            async fn task_backlog(&self, now: Millis) -> Result<Vec<Backlog>> {
                let rows = sqlx::query(
                    "SELECT lambda, priority, MIN(due_at) AS oldest FROM tasks \
                     WHERE status IN ('new', 'retriable_failure', 'enqueued') AND held = FALSE \
                     AND due_at <= $1 GROUP BY lambda, priority ORDER BY lambda, priority",
                )
                .bind(now)
                .fetch_all(&self.pool)
                .await?;
                rows.iter()
                    .map(|row| {
                        Ok(Backlog {
                            lambda: row.text("lambda")?,
                            priority: u8::try_from(row.int("priority")?)
                                .map_err(|_| StoreError::Corrupt("priority".into()))?,
                            oldest_due: row.int("oldest")?,
                        })
                    })
                    .collect()
            }

            async fn attempt_list(&self, task_id: &str) -> Result<Vec<Attempt>> {
                let rows = sqlx::query(
                    "SELECT attempt, lease_token, outcome, error, log, started_at, ended_at \
                     FROM attempts WHERE task_id = $1 ORDER BY lease_token",
                )
                .bind(text_in(task_id))
                .fetch_all(&self.pool)
                .await?;
                rows.iter().map(rows::attempt).collect()
            }

            async fn gate_set(&self, params: GateSet) -> Result<u64> {
                check_lambda_name(&params.lambda)?;
                if let Some(collection) = &params.collection {
                    check_collection_name(collection)?;
                }
                let collection = params.collection.unwrap_or_default();
                let mut tx = self.write().await?;
                lock_gates(&mut tx, $gate_write_lock).await?;
                require_lambda(&mut tx, &params.lambda).await?;
                let released = match params.state {
                    GateState::Open => {
                        sqlx::query("DELETE FROM gates WHERE lambda = $1 AND collection = $2")
                            .bind(&params.lambda)
                            .bind(&collection)
                            .execute(&mut *tx)
                            .await?;
                        sqlx::query(sql(format!(
                            "UPDATE tasks SET held = FALSE, next_trigger_at = due_at \
                             WHERE held = TRUE AND lambda = $1 AND ($2 = '' OR collection = $2) \
                             AND status IN {UNFINISHED} \
                             AND id IN (SELECT t.id FROM tasks t WHERE t.held = TRUE AND t.lambda = $1 \
                             AND COALESCE({GATE_OF_TASK}, 0) = 0)"
                        )))
                        .bind(&params.lambda)
                        .bind(&collection)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected()
                    }
                    state => {
                        sqlx::query(
                            "INSERT INTO gates (lambda, collection, state, updated_at) \
                             VALUES ($1, $2, $3, $4) ON CONFLICT (lambda, collection) \
                             DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at",
                        )
                        .bind(&params.lambda)
                        .bind(&collection)
                        .bind(state.as_str())
                        .bind(params.now)
                        .execute(&mut *tx)
                        .await?;
                        if state == GateState::Dropped {
                            // Held tasks come due now, so the next poll drops them.
                            sqlx::query(sql(format!(
                                "UPDATE tasks SET held = FALSE, next_trigger_at = $3 \
                                 WHERE held = TRUE AND lambda = $1 AND ($2 = '' OR collection = $2) \
                                 AND status IN {UNFINISHED}"
                            )))
                            .bind(&params.lambda)
                            .bind(&collection)
                            .bind(params.now)
                            .execute(&mut *tx)
                            .await?;
                        }
                        0
                    }
                };
                tx.commit().await?;
                Ok(released)
            }

            async fn gate_list(&self) -> Result<Vec<Gate>> {
                let rows = sqlx::query(
                    "SELECT lambda, collection, state, updated_at FROM gates ORDER BY lambda, collection",
                )
                .fetch_all(&self.pool)
                .await?;
                rows.iter()
                    .map(|row| {
                        let collection = row.text("collection")?;
                        let state = match row.text("state")?.as_str() {
                            "paused" => GateState::Paused,
                            "dropped" => GateState::Dropped,
                            other => return Err(StoreError::Corrupt(format!("gate state {other:?}"))),
                        };
                        Ok(Gate {
                            lambda: row.text("lambda")?,
                            collection: (!collection.is_empty()).then_some(collection),
                            state,
                            updated_at: row.int("updated_at")?,
                        })
                    })
                    .collect()
            }

            async fn dead_redrive(&self, params: DeadRedrive) -> Result<u64> {
                // The version to pin (`$3` here; NULL for the current one)
                // also sets the fresh attempt budget.
                let redrive = |v: &str| {
                    format!(
                        "UPDATE tasks SET status = 'new', attempt = 0, \
                         max_attempts = (SELECT v.max_attempts FROM lambda_versions v \
                            WHERE v.lambda = tasks.lambda AND v.version = COALESCE(CAST({v} AS BIGINT), \
                            (SELECT current_version FROM lambdas WHERE name = tasks.lambda))), \
                         due_at = $2, next_trigger_at = $2, finished_at = NULL, \
                         version = CAST({v} AS BIGINT)"
                    )
                };
                let version = params.version.map(i64::from);
                let mut tx = self.write().await?;
                let count = match params.selector {
                    DeadSelector::Ids(ids) => {
                        for id in &ids {
                            let row = sqlx::query("SELECT status, lambda FROM tasks WHERE id = $1")
                                .bind(text_in(id))
                                .fetch_optional(&mut *tx)
                                .await?
                                .ok_or_else(|| StoreError::TaskNotFound(id.clone()))?;
                            let status = rows::status(&row)?;
                            if status != TaskStatus::Dead {
                                return Err(StoreError::NotDead {
                                    id: id.clone(),
                                    status,
                                });
                            }
                            if let Some(pin) = params.version {
                                require_version(&mut tx, &row.text("lambda")?, pin).await?;
                            }
                            sqlx::query(sql(format!("{} WHERE id = $1", redrive("$3"))))
                                .bind(id)
                                .bind(params.now)
                                .bind(version)
                                .execute(&mut *tx)
                                .await?;
                        }
                        ids.len() as u64
                    }
                    DeadSelector::Filter { lambda, collection } => {
                        require_lambda(&mut tx, &lambda).await?;
                        if let Some(pin) = params.version {
                            require_version(&mut tx, &lambda, pin).await?;
                        }
                        sqlx::query(sql(format!(
                            "{} WHERE status = 'dead' AND lambda = $1 AND ($3 IS NULL OR collection = $3)",
                            redrive("$4")
                        )))
                        .bind(&lambda)
                        .bind(params.now)
                        .bind(collection)
                        .bind(version)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected()
                    }
                };
                tx.commit().await?;
                Ok(count)
            }

            async fn token_create(&self, params: TokenCreate) -> Result<()> {
                let token = params.token;
                if token.role != TokenRole::Admin && token.lambdas.is_empty() {
                    return Err(StoreError::Invalid(format!(
                        "a {} token needs the lambdas it may act on",
                        token.role.as_str()
                    )));
                }
                for lambda in &token.lambdas {
                    check_lambda_name(lambda)?;
                }
                let lambdas = serde_json::to_string(&token.lambdas)
                    .map_err(|e| StoreError::Invalid(e.to_string()))?;
                let mut tx = self.write().await?;
                sqlx::query(
                    "INSERT INTO tokens (id, name, role, lambdas, hash, created_at) \
                     VALUES ($1, $2, $3, $4, $5, $6)",
                )
                .bind(&token.id)
                .bind(text_in(&token.name))
                .bind(token.role.as_str())
                .bind(lambdas)
                .bind(&params.hash)
                .bind(token.created_at)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(())
            }

            async fn token_list(&self) -> Result<Vec<Token>> {
                let rows = sqlx::query(
                    "SELECT id, name, role, lambdas, created_at, revoked_at FROM tokens ORDER BY id",
                )
                .fetch_all(&self.pool)
                .await?;
                rows.iter().map(rows::token).collect()
            }

            async fn token_revoke(&self, id: &str, now: Millis) -> Result<bool> {
                let revoked = sqlx::query(
                    "UPDATE tokens SET revoked_at = COALESCE(revoked_at, $2) WHERE id = $1",
                )
                .bind(text_in(id))
                .bind(now)
                .execute(&self.pool)
                .await?
                .rows_affected();
                Ok(revoked == 1)
            }

            async fn token_find(&self, hash: &str) -> Result<Option<Token>> {
                let row = sqlx::query(
                    "SELECT id, name, role, lambdas, created_at, revoked_at FROM tokens \
                     WHERE hash = $1 AND revoked_at IS NULL",
                )
                .bind(text_in(hash))
                .fetch_optional(&self.pool)
                .await?;
                row.as_ref().map(rows::token).transpose()
            }

            async fn cron_create(&self, schedule: Cron) -> Result<()> {
                check_lambda_name(&schedule.lambda)?;
                if let Some(collection) = &schedule.collection {
                    check_collection_name(collection)?;
                }
                let mut tx = self.write().await?;
                let lambda = require_lambda(&mut tx, &schedule.lambda).await?;
                if let Some(priority) = schedule.priority
                    && priority >= lambda.config.priorities
                {
                    return Err(StoreError::InvalidPriority {
                        lambda: lambda.name,
                        priority,
                        max: lambda.config.priorities - 1,
                    });
                }
                if schedule.payload.len() as u64 > lambda.config.max_payload.bytes() {
                    return Err(StoreError::PayloadTooLarge {
                        lambda: lambda.name,
                        size: schedule.payload.len(),
                        max: lambda.config.max_payload.bytes(),
                    });
                }
                sqlx::query(
                    "INSERT INTO schedules (id, lambda, cron, timezone, payload, collection, priority, \
                     catch_up, next_at, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                )
                .bind(&schedule.id)
                .bind(&schedule.lambda)
                .bind(&schedule.cron)
                .bind(&schedule.timezone)
                .bind(&schedule.payload)
                .bind(&schedule.collection)
                .bind(schedule.priority.map(i64::from))
                .bind(schedule.catch_up)
                .bind(schedule.next_at)
                .bind(schedule.created_at)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(())
            }

            async fn cron_list(&self) -> Result<Vec<Cron>> {
                let rows = sqlx::query(sql(format!(
                    "SELECT {CRON_COLUMNS} FROM schedules ORDER BY id"
                )))
                .fetch_all(&self.pool)
                .await?;
                rows.iter().map(rows::cron).collect()
            }

            async fn cron_delete(&self, id: &str) -> Result<bool> {
                let deleted = sqlx::query("DELETE FROM schedules WHERE id = $1")
                    .bind(text_in(id))
                    .execute(&self.pool)
                    .await?
                    .rows_affected();
                Ok(deleted == 1)
            }

            async fn cron_due(&self, now: Millis, limit: u32) -> Result<Vec<Cron>> {
                let rows = sqlx::query(sql(format!(
                    "SELECT {CRON_COLUMNS} FROM schedules WHERE next_at <= $1 ORDER BY next_at LIMIT $2"
                )))
                .bind(now)
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await?;
                rows.iter().map(rows::cron).collect()
            }

            async fn cron_materialize(&self, params: CronMaterialize) -> Result<Materialized> {
                let mut tx = self.write().await?;
                let row = sqlx::query(sql(format!(
                    "UPDATE schedules SET next_at = $3 WHERE id = $1 AND next_at = $2 \
                     RETURNING {CRON_COLUMNS}"
                )))
                .bind(&params.cron_id)
                .bind(params.expected)
                .bind(params.next_at)
                .fetch_optional(&mut *tx)
                .await?;
                let Some(row) = row else {
                    let exists = sqlx::query("SELECT 1 FROM schedules WHERE id = $1")
                        .bind(&params.cron_id)
                        .fetch_optional(&mut *tx)
                        .await?;
                    return match exists {
                        Some(_) => Ok(Materialized::AlreadyDone),
                        None => Err(StoreError::CronNotFound(params.cron_id)),
                    };
                };
                let schedule = rows::cron(&row)?;
                let task = NewTask {
                    lambda: schedule.lambda,
                    collection: schedule.collection,
                    priority: schedule.priority,
                    payload: schedule.payload,
                    run_at: Some(params.occurrence),
                    idempotency_key: Some(format!("schedule:{}:{}", schedule.id, params.occurrence)),
                    parent_id: None,
                    version: None,
                    parent_lease: None,
                    continuation: None,
                };
                // Refused input is found before anything is written: the
                // schedule still moves on, past the occurrence it skips.
                let answer = match insert_tasks(&mut tx, vec![task], Some(&schedule.id), Origin::Store, params.now).await {
                    Ok(mut inserted) => {
                        let inserted = inserted.remove(0);
                        if inserted.created {
                            Materialized::Created(inserted.id)
                        } else {
                            Materialized::AlreadyDone
                        }
                    }
                    Err(StoreError::Database(error)) => return Err(StoreError::Database(error)),
                    Err(refused) => Materialized::Skipped(refused.to_string()),
                };
                tx.commit().await?;
                Ok(answer)
            }
        }

        /// The status of a task waiting for its next attempt, in SQL: `new`
        /// before its first, `retriable_failure` after.
        const WAITING: &str = "CASE WHEN attempt = 0 THEN 'new' ELSE 'retriable_failure' END";

        /// Holds a task under a paused gate: it waits in the store, not
        /// due, until the gate opens, then comes due at the earlier of
        /// when it was due and when it was looked at. Whatever message of it a queue still
        /// has goes stale, and a lapsed execution's error is kept.
        /// `guard` narrows the update for a caller that holds no row lock:
        /// of two such callers, the second finds the task held and leaves
        /// it.
        async fn hold(conn: &mut $conn, id: &str, lapsed: Option<&str>, guard: &str) -> Result<()> {
            sqlx::query(sql(format!(
                "UPDATE tasks SET status = {WAITING}, held = TRUE, \
                 due_at = CASE WHEN next_trigger_at < due_at THEN next_trigger_at ELSE due_at END, \
                 next_trigger_at = NULL, paced = FALSE, enqueue_token = enqueue_token + 1, \
                 last_error = COALESCE($2, last_error) WHERE id = $1 {guard}"
            )))
            .bind(id)
            .bind(lapsed)
            .execute(&mut *conn)
            .await?;
            Ok(())
        }

        /// Ends a task under a drop gate; `guard` as for [`hold`].
        async fn drop_task(conn: &mut $conn, id: &str, now: Millis, guard: &str) -> Result<()> {
            sqlx::query(sql(format!(
                "UPDATE tasks SET status = 'dropped', next_trigger_at = NULL, held = FALSE, \
                 finished_at = $2 WHERE id = $1 {guard}"
            )))
            .bind(id)
            .bind(now)
            .execute(&mut *conn)
            .await?;
            Ok(())
        }

        /// After a deploy or rollback, a lambda's tasks paced under its old
        /// quota come due now and are paced afresh under the new one.
        async fn repace(conn: &mut $conn, lambda: &str, now: Millis) -> Result<()> {
            sqlx::query("DELETE FROM lambda_pace WHERE lambda = $1")
                .bind(lambda)
                .execute(&mut *conn)
                .await?;
            sqlx::query(
                "UPDATE tasks SET paced = FALSE, \
                 next_trigger_at = CASE WHEN next_trigger_at > $2 THEN $2 ELSE next_trigger_at END \
                 WHERE lambda = $1 AND paced = TRUE",
            )
            .bind(lambda)
            .bind(now)
            .execute(&mut *conn)
            .await?;
            Ok(())
        }

        async fn insert_version(
            conn: &mut $conn,
            params: &LambdaDeploy,
            version: i64,
        ) -> Result<()> {
            let LambdaConfig {
                limits,
                max_attempts,
                backoff,
                priorities,
                default_priority,
                max_payload,
                concurrency,
                quota_per_sec,
                allowed_children,
            } = &params.config;
            sqlx::query(
                "INSERT INTO lambda_versions (lambda, version, digest, max_memory, timeout_ms, fuel, \
                 max_output, max_log, max_attempts, backoff_base_ms, backoff_factor, backoff_max_ms, \
                 priorities, default_priority, max_payload, concurrency, quota_per_sec, created_at, \
                 allowed_children) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, \
                 $18, $19)",
            )
            .bind(&params.name)
            .bind(version)
            .bind(&params.digest)
            .bind(limits.max_memory.bytes() as i64)
            .bind(millis(limits.timeout))
            .bind(limits.fuel.map(|f| i64::try_from(f).unwrap_or(i64::MAX)))
            .bind(limits.max_output.bytes() as i64)
            .bind(limits.max_log.bytes() as i64)
            .bind(i64::from(*max_attempts))
            .bind(millis(backoff.base))
            .bind(backoff.factor)
            .bind(millis(backoff.max))
            .bind(i64::from(*priorities))
            .bind(i64::from(*default_priority))
            .bind(max_payload.bytes() as i64)
            .bind(i64::from(*concurrency))
            .bind(*quota_per_sec)
            .bind(params.now)
            .bind(allowed_children.join("\n"))
            .execute(&mut *conn)
            .await?;
            Ok(())
        }

        /// Creates the continuations of the tasks that just succeeded: a
        /// task of the declared lambda with the output as payload, as the
        /// succeeded task's child, at most once (its idempotency key). A
        /// continuation the store cannot create (the output over the next
        /// lambda's payload limit, a priority it no longer has) is recorded
        /// as the succeeded task's `last_error`; the success stands. Each of
        /// `continued` is a task id, its continuation (JSON) and its output.
        async fn continue_successes(
            conn: &mut $conn,
            continued: Vec<(String, String, Option<Vec<u8>>)>,
            now: Millis,
        ) -> Result<()> {
            for (id, json, output) in continued {
                let then: $crate::Continuation = serde_json::from_str(&json)
                    .map_err(|e| StoreError::Corrupt(format!("continuation {json:?}: {e}")))?;
                let next = NewTask {
                    lambda: then.lambda,
                    collection: then.collection,
                    priority: then.priority,
                    payload: output.unwrap_or_default(),
                    idempotency_key: Some(format!("then:{id}")),
                    parent_id: Some(id.clone()),
                    ..NewTask::default()
                };
                match insert_tasks(conn, vec![next], None, Origin::Store, now).await {
                    Ok(_) => {}
                    Err(StoreError::Database(error)) => return Err(StoreError::Database(error)),
                    Err(error) => {
                        sqlx::query("UPDATE tasks SET last_error = $2 WHERE id = $1")
                            .bind(&id)
                            .bind(text_in(&format!("the continuation was not created: {error}")).into_owned())
                            .execute(&mut *conn)
                            .await?;
                    }
                }
            }
            Ok(())
        }

        /// Records ended executions (`{id, outcome, error, log}` each) at
        /// their task's current attempt and lease. An execution already
        /// recorded (a paced task polled again) is kept as it was.
        async fn record_attempts(
            conn: &mut $conn,
            ended: Vec<serde_json::Value>,
            now: Millis,
        ) -> Result<()> {
            if ended.is_empty() {
                return Ok(());
            }
            // Each under the lease it ran with, which is still the task's.
            let ended: Vec<serde_json::Value> = ended
                .into_iter()
                .map(|mut record| {
                    for field in ["id", "error", "log"] {
                        if let Some(serde_json::Value::String(text)) = record.get_mut(field) {
                            *text = text_in(text).into_owned();
                        }
                    }
                    record
                })
                .collect();
            sqlx::query(sql(format!(
                "INSERT INTO attempts (task_id, lease_token, attempt, outcome, error, log, \
                 started_at, ended_at) \
                 SELECT t.id, t.lease_token, t.attempt, a.outcome, a.error, a.log, t.claimed_at, $2 \
                 FROM (SELECT j.value->>'id' AS attempt_task, CAST(j.value->>'lease' AS BIGINT) AS lease, \
                    j.value->>'outcome' AS outcome, \
                    j.value->>'error' AS error, j.value->>'log' AS log FROM {}) AS a \
                 JOIN tasks t ON t.id = a.attempt_task AND t.lease_token = a.lease WHERE TRUE \
                 ON CONFLICT (task_id, lease_token) DO NOTHING",
                $json_rows
            )))
            .bind(serde_json::Value::Array(ended).to_string())
            .bind(now)
            .execute(&mut *conn)
            .await?;
            Ok(())
        }

        /// Paces lambdas with a scheduling quota. Of `due` (id, lambda,
        /// already paced), answers the ids to enqueue now, in order; every
        /// other task of a paced lambda waits for its own slot, given in
        /// turn from the lambda's next free one at `1 / quota` apart. A
        /// lambda idle for a second has a second's worth of slots at once.
        async fn pace(
            conn: &mut $conn,
            due: Vec<(String, String, bool, Option<&'static str>)>,
            now: Millis,
            report: &mut EnqueueReport,
        ) -> Result<Vec<(String, Option<&'static str>)>> {
            if due.is_empty() {
                return Ok(Vec::new());
            }
            let quotas: HashMap<String, f64> = sqlx::query(
                "SELECT l.name, v.quota_per_sec FROM lambdas l JOIN lambda_versions v \
                 ON v.lambda = l.name AND v.version = l.current_version \
                 WHERE v.quota_per_sec IS NOT NULL",
            )
            .fetch_all(&mut *conn)
            .await?
            .iter()
            .map(|row| Ok((row.text("name")?, row.real("quota_per_sec")?)))
            .collect::<Result<_>>()?;
            let mut paced: Vec<&str> = due
                .iter()
                .filter(|(_, lambda, already, _)| !already && quotas.contains_key(lambda))
                .map(|(_, lambda, _, _)| lambda.as_str())
                .collect();
            if paced.is_empty() {
                return Ok(due.into_iter().map(|(id, _, _, lapsed)| (id, lapsed)).collect());
            }
            // One lock order for every consumer: by name.
            paced.sort_unstable();
            paced.dedup();
            let mut slots: HashMap<String, f64> = HashMap::with_capacity(paced.len());
            for lambda in paced {
                sqlx::query(
                    "INSERT INTO lambda_pace (lambda, next_slot_at) VALUES ($1, $2) \
                     ON CONFLICT (lambda) DO NOTHING",
                )
                .bind(lambda)
                .bind((now - 1000) as f64)
                .execute(&mut *conn)
                .await?;
                let next: f64 = sqlx::query_scalar(sql(format!(
                    "SELECT next_slot_at FROM lambda_pace WHERE lambda = $1 {}",
                    $row_lock
                )))
                .bind(lambda)
                .fetch_one(&mut *conn)
                .await?;
                slots.insert(lambda.to_owned(), next.max((now - 1000) as f64));
            }
            let mut now_ids = Vec::with_capacity(due.len());
            let mut later = Vec::new();
            for (id, lambda, already, lapsed) in due {
                let slot = match slots.get_mut(&lambda) {
                    Some(slot) if !already => slot,
                    _ => {
                        now_ids.push((id, lapsed));
                        continue;
                    }
                };
                let at = *slot;
                *slot += 1000.0 / quotas[&lambda];
                if at < now as f64 {
                    now_ids.push((id, lapsed));
                } else {
                    later.push(serde_json::json!({ "id": id, "at": at.ceil() as i64, "error": lapsed }));
                }
            }
            for (lambda, next) in &slots {
                sqlx::query("UPDATE lambda_pace SET next_slot_at = $2 WHERE lambda = $1")
                    .bind(lambda)
                    .bind(*next)
                    .execute(&mut *conn)
                    .await?;
            }
            if !later.is_empty() {
                report.paced = later.len() as u64;
                // A paced task waits like a retrying one: not claimable from
                // a message it may still have on a queue.
                sqlx::query(sql(format!(
                    "UPDATE tasks SET next_trigger_at = d.at, paced = TRUE, status = {WAITING}, \
                     enqueue_token = enqueue_token + 1, last_error = COALESCE(d.paced_error, last_error) \
                     FROM (SELECT j.value->>'id' AS paced_id, CAST(j.value->>'at' AS BIGINT) AS at, \
                     j.value->>'error' AS paced_error FROM {}) AS d WHERE tasks.id = d.paced_id",
                    $json_rows
                )))
                .bind(serde_json::Value::Array(later).to_string())
                .execute(&mut *conn)
                .await?;
            }
            Ok(now_ids)
        }

        fn claimed(row: &$row) -> Result<ClaimedTask> {
            let small = |column: &str| -> Result<i64> { row.int(column) };
            Ok(ClaimedTask {
                id: row.text("id")?,
                lambda: row.text("lambda")?,
                lambda_version: u32::try_from(small("lambda_version")?)
                    .map_err(|_| StoreError::Corrupt("lambda_version".into()))?,
                collection: row.text("collection")?,
                priority: u8::try_from(small("priority")?)
                    .map_err(|_| StoreError::Corrupt("priority".into()))?,
                payload: row.bytes("payload")?,
                attempt: u32::try_from(small("attempt")?)
                    .map_err(|_| StoreError::Corrupt("attempt".into()))?,
                scheduled_at: small("scheduled_at")?,
                lease_token: small("lease_token")?,
            })
        }

        /// The guard of a refused claim's own update: the task is still
        /// queued, as the refusal read it.
        const QUEUED: &str = "AND status = 'enqueued' AND held = FALSE";

        /// Why a claim was refused. A queued task under a closed gate is
        /// acted on here, as the poll would: held, or dropped.
        async fn claim_refusal(conn: &mut $conn, id: &str, now: Millis) -> Result<Refusal> {
            // Read unlocked (a lock would make a concurrent poll skip the
            // task); only a refusal that acts on the task — a hold or drop
            // under a closed gate — reads it again under a lock, so its
            // answer is about the task as it is, not as a cancel committing
            // meanwhile left it.
            let mut lock = "";
            loop {
                let row = sqlx::query(sql(format!(
                    "SELECT t.status, t.enqueue_token, t.held, {GATE_OF_TASK} AS gate FROM tasks t \
                     WHERE t.id = $1 {lock}"
                )))
                .bind(text_in(id))
                .fetch_optional(&mut *conn)
                .await?;
                let Some(row) = row else {
                    return Ok(Refusal::NotFound);
                };
                let status = rows::status(&row)?;
                if row.flag("held")? {
                    return Ok(Refusal::Held);
                }
                if status != TaskStatus::Enqueued {
                    return Ok(Refusal::WrongState(status));
                }
                let gate = GateEffect::from_code(row.opt_int("gate")?);
                if gate != GateEffect::Open && lock != $row_lock {
                    lock = $row_lock;
                    continue;
                }
                return Ok(match gate {
                    GateEffect::Hold => {
                        hold(conn, id, None, QUEUED).await?;
                        Refusal::Held
                    }
                    GateEffect::Drop => {
                        drop_task(conn, id, now, QUEUED).await?;
                        Refusal::WrongState(TaskStatus::Dropped)
                    }
                    GateEffect::Open => Refusal::StaleEnqueueToken {
                        current: row.int("enqueue_token")?,
                    },
                });
            }
        }
    };
}

pub(crate) use sql_task_store;
