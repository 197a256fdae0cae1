-- Waft's task store, SQLite flavour (the embedded default).
-- Times are Unix milliseconds. Keep in step with ../postgres/0001_tasks.sql.

CREATE TABLE components (
    digest     TEXT PRIMARY KEY,
    bytes      BLOB NOT NULL,
    created_at INTEGER NOT NULL
);

CREATE TABLE lambdas (
    name            TEXT PRIMARY KEY,
    current_version INTEGER NOT NULL,
    created_at      INTEGER NOT NULL
);

CREATE TABLE lambda_versions (
    lambda           TEXT NOT NULL REFERENCES lambdas (name),
    version          INTEGER NOT NULL,
    digest           TEXT NOT NULL REFERENCES components (digest),
    max_memory       INTEGER NOT NULL,
    timeout_ms       INTEGER NOT NULL,
    fuel             INTEGER,
    max_output       INTEGER NOT NULL,
    max_log          INTEGER NOT NULL,
    max_attempts     INTEGER NOT NULL,
    backoff_base_ms  INTEGER NOT NULL,
    backoff_factor   REAL NOT NULL,
    backoff_max_ms   INTEGER NOT NULL,
    priorities       INTEGER NOT NULL,
    default_priority INTEGER NOT NULL,
    max_payload      INTEGER NOT NULL,
    concurrency      INTEGER NOT NULL,
    quota_per_sec    REAL,
    created_at       INTEGER NOT NULL,
    PRIMARY KEY (lambda, version)
);

CREATE TABLE tasks (
    id              TEXT PRIMARY KEY,
    lambda          TEXT NOT NULL REFERENCES lambdas (name),
    collection      TEXT NOT NULL,
    priority        INTEGER NOT NULL,
    payload         BLOB NOT NULL,
    status          TEXT NOT NULL,
    attempt         INTEGER NOT NULL DEFAULT 0,
    max_attempts    INTEGER NOT NULL,
    scheduled_at    INTEGER NOT NULL,
    -- When the task should run next, kept while a gate holds it.
    due_at          INTEGER NOT NULL,
    -- When the Store Consumer looks at the task again; NULL when terminal
    -- or held. Every state change sets it in the same statement.
    next_trigger_at INTEGER,
    held            INTEGER NOT NULL DEFAULT 0,
    enqueue_token   INTEGER NOT NULL DEFAULT 0,
    lease_token     INTEGER NOT NULL DEFAULT 0,
    created_at      INTEGER NOT NULL,
    enqueued_at     INTEGER,
    claimed_at      INTEGER,
    heartbeat_at    INTEGER,
    finished_at     INTEGER,
    progress        TEXT,
    last_error      TEXT,
    output          BLOB,
    parent_id       TEXT,
    idempotency_key TEXT,
    schedule_id     TEXT
) STRICT;

-- The poll reads due tasks in trigger order: its cost follows the number of
-- due tasks, not the table's size.
CREATE INDEX tasks_next_trigger ON tasks (next_trigger_at) WHERE next_trigger_at IS NOT NULL;
CREATE UNIQUE INDEX tasks_idempotency ON tasks (lambda, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX tasks_lambda_status ON tasks (lambda, status, id);
CREATE INDEX tasks_status ON tasks (status, id);
CREATE INDEX tasks_parent ON tasks (parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX tasks_held ON tasks (lambda, collection, due_at) WHERE held = 1;

CREATE TABLE gates (
    lambda     TEXT NOT NULL REFERENCES lambdas (name),
    -- '' for the whole lambda.
    collection TEXT NOT NULL,
    state      TEXT NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (lambda, collection)
);

CREATE TABLE schedules (
    id         TEXT PRIMARY KEY,
    lambda     TEXT NOT NULL REFERENCES lambdas (name),
    cron       TEXT NOT NULL,
    timezone   TEXT NOT NULL,
    payload    BLOB NOT NULL,
    collection TEXT,
    priority   INTEGER,
    catch_up   INTEGER NOT NULL,
    next_at    INTEGER NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX schedules_next_at ON schedules (next_at);
