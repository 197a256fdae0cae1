-- Waft's task store, Postgres flavour (production).
-- Times are Unix milliseconds. Keep in step with ../sqlite/0001_tasks.sql.

CREATE TABLE components (
    digest     TEXT PRIMARY KEY,
    bytes      BYTEA NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE lambdas (
    name            TEXT PRIMARY KEY,
    current_version BIGINT NOT NULL,
    created_at      BIGINT NOT NULL
);

CREATE TABLE lambda_versions (
    lambda           TEXT NOT NULL REFERENCES lambdas (name),
    version          BIGINT NOT NULL,
    digest           TEXT NOT NULL REFERENCES components (digest),
    max_memory       BIGINT NOT NULL,
    timeout_ms       BIGINT NOT NULL,
    fuel             BIGINT,
    max_output       BIGINT NOT NULL,
    max_log          BIGINT NOT NULL,
    max_attempts     BIGINT NOT NULL,
    backoff_base_ms  BIGINT NOT NULL,
    backoff_factor   DOUBLE PRECISION NOT NULL,
    backoff_max_ms   BIGINT NOT NULL,
    priorities       BIGINT NOT NULL,
    default_priority BIGINT NOT NULL,
    max_payload      BIGINT NOT NULL,
    concurrency      BIGINT NOT NULL,
    quota_per_sec    DOUBLE PRECISION,
    created_at       BIGINT NOT NULL,
    PRIMARY KEY (lambda, version)
);

CREATE TABLE tasks (
    id              TEXT PRIMARY KEY,
    lambda          TEXT NOT NULL REFERENCES lambdas (name),
    collection      TEXT NOT NULL,
    priority        BIGINT NOT NULL,
    payload         BYTEA NOT NULL,
    status          TEXT NOT NULL,
    attempt         BIGINT NOT NULL DEFAULT 0,
    max_attempts    BIGINT NOT NULL,
    scheduled_at    BIGINT NOT NULL,
    -- When the task should run next, kept while a gate holds it.
    due_at          BIGINT NOT NULL,
    -- When the Store Consumer looks at the task again; NULL when terminal
    -- or held. Every state change sets it in the same statement.
    next_trigger_at BIGINT,
    held            BOOLEAN NOT NULL DEFAULT FALSE,
    enqueue_token   BIGINT NOT NULL DEFAULT 0,
    lease_token     BIGINT NOT NULL DEFAULT 0,
    created_at      BIGINT NOT NULL,
    enqueued_at     BIGINT,
    claimed_at      BIGINT,
    heartbeat_at    BIGINT,
    finished_at     BIGINT,
    progress        TEXT,
    last_error      TEXT,
    output          BYTEA,
    parent_id       TEXT,
    idempotency_key TEXT,
    schedule_id     TEXT
);

-- The poll reads due tasks in trigger order: its cost follows the number of
-- due tasks, not the table's size.
CREATE INDEX tasks_next_trigger ON tasks (next_trigger_at) WHERE next_trigger_at IS NOT NULL;
CREATE UNIQUE INDEX tasks_idempotency ON tasks (lambda, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX tasks_lambda_status ON tasks (lambda, status, id);
CREATE INDEX tasks_status ON tasks (status, id);
CREATE INDEX tasks_parent ON tasks (parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX tasks_held ON tasks (lambda, collection, due_at) WHERE held;

CREATE TABLE gates (
    lambda     TEXT NOT NULL REFERENCES lambdas (name),
    -- '' for the whole lambda.
    collection TEXT NOT NULL,
    state      TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (lambda, collection)
);

CREATE TABLE schedules (
    id         TEXT PRIMARY KEY,
    lambda     TEXT NOT NULL REFERENCES lambdas (name),
    cron       TEXT NOT NULL,
    timezone   TEXT NOT NULL,
    payload    BYTEA NOT NULL,
    collection TEXT,
    priority   BIGINT,
    catch_up   BOOLEAN NOT NULL,
    next_at    BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX schedules_next_at ON schedules (next_at);
