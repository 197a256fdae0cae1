//! What differs between SQLite and Postgres, named once.
//!
//! The store's SQL (`sql/`) is written once for both databases: `$N`
//! parameters, `RETURNING`, `ON CONFLICT`, `TRUE`/`FALSE` and BIGINT casts
//! mean the same in both. These are the places where they do not, as
//! fragments the shared statements splice in. Each backend also names its
//! connection and row types, and how a writing transaction begins (SQLite's
//! `BEGIN IMMEDIATE`); everything else is common.

/// The SQL fragments in which the databases differ.
pub(crate) struct Dialect {
    /// Appended to the poll's SELECT: Postgres's `FOR UPDATE ... SKIP
    /// LOCKED`, so concurrent consumers take different tasks.
    pub poll_lock: &'static str,
    /// Appended to a SELECT of one row the transaction will update:
    /// Postgres's `FOR UPDATE`, so concurrent writers take turns.
    pub row_lock: &'static str,
    /// The rows of the JSON array bound as `$1`, as a table `j` with a
    /// column `value` holding each element. SQLite's `jsonb_each` gives an
    /// object element in its binary form, which each `->>` reads as it is;
    /// `json_each` gave it as text, parsed again by every `->>` (a batch's
    /// insert took 34 µs a task, now 18 µs).
    pub json_rows: &'static str,
    /// Appended to a SELECT of rows of `tasks` (as `t`) that another
    /// transaction may be ending: Postgres's `FOR SHARE OF t`, which waits
    /// for such a transaction to commit, so the next statement reads its end.
    pub share_lock: &'static str,
    /// Appended to the SELECT of a lambda (as `l`) whose tasks the
    /// transaction inserts: Postgres's `FOR KEY SHARE OF l`, which a delete
    /// of the lambda waits for (and which waits for one), so that no task
    /// outlives its lambda. Postgres checks a task's lambda so, once a batch,
    /// rather than by a foreign key on every row; SQLite keeps the foreign
    /// key, as it writes one transaction at a time.
    pub lambda_key_lock: &'static str,
    /// Decodes hex text (`{}`) into bytes; see [`Dialect::unhex`].
    unhex: &'static str,
    /// A statement run first by every transaction that reads gates to act
    /// on tasks (the poll, claims), and one run first by a gate change, a
    /// deploy and a rollback: Postgres's shared and exclusive advisory
    /// locks, so a gate change never interleaves with a poll or claim that
    /// read the gate before it (a resume would miss the tasks such a poll
    /// holds), and a lambda's limits never change under a poll, whether or
    /// not it takes the keys' lock (polls and claims wait for a deploy's
    /// statements after its component is stored). Empty where the database
    /// needs none.
    pub gate_read_lock: &'static str,
    pub gate_write_lock: &'static str,
    /// A statement run by a poll before it reads the limits per key (when
    /// a lambda has one): Postgres's advisory lock (one constant key for
    /// "the keys"), so that two consumers never both take a key's last
    /// place. Each takes it after the gates' lock, before it locks any
    /// task.
    pub keys_lock: &'static str,
    /// Run by a deploy before it rewrites rows that results and
    /// heartbeats lock in another order: Postgres's `lock_timeout` for the
    /// rest of the transaction, so the deploy gives way (55P03, tried
    /// again, [`crate::StoreError::gave_way`]) before a deadlock could
    /// abort the other side.
    pub yield_row_locks: &'static str,
    /// Selects the database server's clock, in Unix milliseconds.
    pub clock: &'static str,
    /// After `FROM tasks` in the overview: SQLite's planner, without
    /// statistics, may prefer an index of the status and a row lookup per
    /// task over the covering `tasks_live` (1.1 s against 0.27 s at
    /// 900,000 waiting tasks), so it is named; Postgres's planner finds it
    /// by itself.
    pub live_tasks_index: &'static str,
}

impl Dialect {
    /// SQLite has one writer at a time and every writing transaction takes
    /// the write lock first (`BEGIN IMMEDIATE`): no row or gate locks.
    pub const SQLITE: Dialect = Dialect {
        poll_lock: "",
        row_lock: "",
        json_rows: "jsonb_each($1) AS j",
        share_lock: "",
        lambda_key_lock: "",
        unhex: "unhex({})",
        gate_read_lock: "",
        gate_write_lock: "",
        keys_lock: "",
        yield_row_locks: "",
        // SQLite runs in the process: its clock is the host's.
        clock: "SELECT CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)",
        live_tasks_index: "INDEXED BY tasks_live",
    };

    /// Postgres runs concurrent writers: the poll skips rows another
    /// consumer holds, single-row updates lock first, and gates take an
    /// advisory lock (one arbitrary constant key for "the gates").
    pub const POSTGRES: Dialect = Dialect {
        poll_lock: "FOR UPDATE OF t SKIP LOCKED",
        row_lock: "FOR UPDATE",
        json_rows: "jsonb_array_elements(CAST($1 AS jsonb)) AS j(value)",
        share_lock: "FOR SHARE OF t",
        lambda_key_lock: "FOR KEY SHARE OF l",
        unhex: "decode({}, 'hex')",
        gate_read_lock: "SELECT pg_advisory_xact_lock_shared(7239)",
        gate_write_lock: "SELECT pg_advisory_xact_lock(7239)",
        keys_lock: "SELECT pg_advisory_xact_lock(7240)",
        yield_row_locks: "SET LOCAL lock_timeout = '200ms'",
        // The time now, not at the transaction's start.
        clock: "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
        live_tasks_index: "",
    };

    /// SQL that decodes the hex text `expression` into bytes.
    pub fn unhex(&self, expression: &str) -> String {
        self.unhex.replace("{}", expression)
    }
}
