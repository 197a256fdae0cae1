-- The database refuses a state it does not know: every column that names a
-- state (a task's status, an attempt's outcome, a gate's state, a token's
-- role) is checked against the model's names (src/rows.rs holds these
-- lists to waft_core's enums by a test). And periodic schedules are crons
-- here too, as everywhere else: `schedules` becomes `crons`, `schedule_id`
-- becomes `cron_id`, and an occurrence's idempotency key `schedule:CRON:AT`
-- becomes `cron:CRON:AT`. tests/schema.rs holds this file and the other
-- backend's 0014 to one schema.
--
-- SQLite adds no CHECK to a table that exists: each checked table is
-- rebuilt (https://www.sqlite.org/lang_altertable.html#otheralter: create
-- the new table, copy, drop the old, rename, recreate its indexes; these
-- tables have no triggers or views). Foreign keys stay on and valid at
-- every step: `attempts`, the one table that references `tasks`, is set
-- aside before `tasks` is dropped and rebuilt after, so no row ever points
-- at a missing task.

CREATE TEMP TABLE attempts_kept AS SELECT * FROM attempts;
DROP TABLE attempts;

CREATE TABLE tasks_checked (
    id              TEXT PRIMARY KEY,
    lambda          TEXT NOT NULL REFERENCES lambdas (name),
    collection      TEXT NOT NULL,
    priority        INTEGER NOT NULL,
    payload         BLOB NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('new', 'enqueued', 'claimed', 'processing', 'retriable_failure', 'success', 'fatal_failure', 'dead', 'dropped', 'cancelled')),
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
    cron_id         TEXT,
    log             TEXT,
    paced           INTEGER NOT NULL DEFAULT FALSE,
    version         INTEGER,
    continuation    TEXT
) STRICT;
INSERT INTO tasks_checked (id, lambda, collection, priority, payload, status, attempt,
    max_attempts, scheduled_at, due_at, next_trigger_at, held, enqueue_token, lease_token,
    created_at, enqueued_at, claimed_at, heartbeat_at, finished_at, progress, last_error, output,
    parent_id, idempotency_key, cron_id, log, paced, version, continuation)
SELECT id, lambda, collection, priority, payload, status, attempt,
    max_attempts, scheduled_at, due_at, next_trigger_at, held, enqueue_token, lease_token,
    created_at, enqueued_at, claimed_at, heartbeat_at, finished_at, progress, last_error, output,
    parent_id, idempotency_key, schedule_id, log, paced, version, continuation
FROM tasks;
DROP TABLE tasks;
ALTER TABLE tasks_checked RENAME TO tasks;

-- The indexes of 0001 and 0012, as they were written.
CREATE INDEX tasks_next_trigger ON tasks (next_trigger_at) WHERE next_trigger_at IS NOT NULL;
CREATE UNIQUE INDEX tasks_idempotency ON tasks (lambda, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX tasks_lambda_status ON tasks (lambda, status, id);
CREATE INDEX tasks_status ON tasks (status, id);
CREATE INDEX tasks_parent ON tasks (parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX tasks_held ON tasks (lambda, collection, due_at) WHERE held = 1;
CREATE INDEX tasks_live ON tasks (lambda, priority, status, held, due_at)
    WHERE status IN ('new', 'enqueued', 'claimed', 'processing', 'retriable_failure', 'dead');
CREATE INDEX tasks_collection ON tasks (lambda, collection, id);

CREATE TABLE attempts (
    task_id     TEXT NOT NULL REFERENCES tasks (id),
    lease_token INTEGER NOT NULL,
    attempt     INTEGER NOT NULL,
    -- lost: the executor stopped heartbeating.
    outcome     TEXT NOT NULL CHECK (outcome IN ('success', 'retriable', 'fatal', 'lost')),
    error       TEXT,
    log         TEXT,
    started_at  INTEGER,
    ended_at    INTEGER NOT NULL,
    PRIMARY KEY (task_id, lease_token)
) STRICT;
INSERT INTO attempts (task_id, lease_token, attempt, outcome, error, log, started_at, ended_at)
SELECT task_id, lease_token, attempt, outcome, error, log, started_at, ended_at
FROM attempts_kept;
DROP TABLE attempts_kept;
CREATE INDEX attempts_ended ON attempts (ended_at, outcome);

CREATE TABLE gates_checked (
    lambda     TEXT NOT NULL REFERENCES lambdas (name),
    -- '' for the whole lambda.
    collection TEXT NOT NULL,
    state      TEXT NOT NULL CHECK (state IN ('open', 'paused', 'dropped')),
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (lambda, collection)
);
INSERT INTO gates_checked (lambda, collection, state, updated_at)
SELECT lambda, collection, state, updated_at FROM gates;
DROP TABLE gates;
ALTER TABLE gates_checked RENAME TO gates;

CREATE TABLE tokens_checked (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    role       TEXT NOT NULL CHECK (role IN ('admin', 'owner', 'scheduler')),
    lambdas    TEXT NOT NULL,
    hash       TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
) STRICT;
INSERT INTO tokens_checked (id, name, role, lambdas, hash, created_at, revoked_at)
SELECT id, name, role, lambdas, hash, created_at, revoked_at FROM tokens;
DROP TABLE tokens;
ALTER TABLE tokens_checked RENAME TO tokens;

ALTER TABLE schedules RENAME TO crons;
DROP INDEX schedules_next_at;
CREATE INDEX crons_next_at ON crons (next_at);

-- Occurrences made before keep their key under the new prefix, so none is
-- made again; a key some client took meanwhile is left as it was.
UPDATE tasks SET idempotency_key = 'cron:' || substr(idempotency_key, 10)
    WHERE cron_id IS NOT NULL AND substr(idempotency_key, 1, 9) = 'schedule:'
    AND NOT EXISTS (SELECT 1 FROM tasks other WHERE other.lambda = tasks.lambda
        AND other.idempotency_key = 'cron:' || substr(tasks.idempotency_key, 10));
