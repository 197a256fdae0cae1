-- Durable lambdas wait without holding an instance: a task whose execution
-- ended in a long wait is `suspended` until the wait is over, and that
-- execution's attempt is recorded as `suspended`. tests/schema.rs holds
-- this file and the other backend's 0016 to one schema.
--
-- SQLite alters no CHECK: `tasks` and `attempts` are rebuilt as 0014 did.
-- `attempts` and `journal`, the tables that reference `tasks`, are set
-- aside before `tasks` is dropped and rebuilt after, so no row ever points
-- at a missing task (and `journal`'s cascade deletes nothing).

CREATE TEMP TABLE attempts_kept AS SELECT * FROM attempts;
DROP TABLE attempts;
CREATE TEMP TABLE journal_kept AS SELECT * FROM journal;
DROP TABLE journal;

CREATE TABLE tasks_checked (
    id              TEXT PRIMARY KEY,
    lambda          TEXT NOT NULL REFERENCES lambdas (name),
    collection      TEXT NOT NULL,
    priority        INTEGER NOT NULL,
    payload         BLOB NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('new', 'enqueued', 'claimed', 'processing', 'suspended', 'retriable_failure', 'success', 'fatal_failure', 'dead', 'dropped', 'cancelled')),
    attempt         INTEGER NOT NULL DEFAULT 0,
    max_attempts    INTEGER NOT NULL,
    scheduled_at    INTEGER NOT NULL,
    -- When the task should run next, kept while a gate holds it (a
    -- suspended task's: when its wait is over).
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
    continuation    TEXT,
    journal_len     INTEGER NOT NULL DEFAULT 0,
    journal_version INTEGER,
    claimed_version INTEGER
) STRICT;
INSERT INTO tasks_checked (id, lambda, collection, priority, payload, status, attempt,
    max_attempts, scheduled_at, due_at, next_trigger_at, held, enqueue_token, lease_token,
    created_at, enqueued_at, claimed_at, heartbeat_at, finished_at, progress, last_error, output,
    parent_id, idempotency_key, cron_id, log, paced, version, continuation, journal_len,
    journal_version, claimed_version)
SELECT id, lambda, collection, priority, payload, status, attempt,
    max_attempts, scheduled_at, due_at, next_trigger_at, held, enqueue_token, lease_token,
    created_at, enqueued_at, claimed_at, heartbeat_at, finished_at, progress, last_error, output,
    parent_id, idempotency_key, cron_id, log, paced, version, continuation, journal_len,
    journal_version, claimed_version
FROM tasks;
DROP TABLE tasks;
ALTER TABLE tasks_checked RENAME TO tasks;

-- The indexes of 0014, `tasks_live` with the new live state.
CREATE INDEX tasks_next_trigger ON tasks (next_trigger_at) WHERE next_trigger_at IS NOT NULL;
CREATE UNIQUE INDEX tasks_idempotency ON tasks (lambda, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX tasks_lambda_status ON tasks (lambda, status, id);
CREATE INDEX tasks_status ON tasks (status, id);
CREATE INDEX tasks_parent ON tasks (parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX tasks_held ON tasks (lambda, collection, due_at) WHERE held = 1;
CREATE INDEX tasks_live ON tasks (lambda, priority, status, held, due_at)
    WHERE status IN ('new', 'enqueued', 'claimed', 'processing', 'suspended', 'retriable_failure', 'dead');
CREATE INDEX tasks_collection ON tasks (lambda, collection, id);

CREATE TABLE attempts (
    task_id     TEXT NOT NULL REFERENCES tasks (id),
    lease_token INTEGER NOT NULL,
    attempt     INTEGER NOT NULL,
    -- lost: the executor stopped heartbeating; suspended: it ended in a
    -- long wait.
    outcome     TEXT NOT NULL CHECK (outcome IN ('success', 'retriable', 'fatal', 'lost', 'suspended')),
    error       TEXT,
    log         TEXT,
    started_at  INTEGER,
    ended_at    INTEGER NOT NULL,
    replayed    INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (task_id, lease_token)
) STRICT;
INSERT INTO attempts (task_id, lease_token, attempt, outcome, error, log, started_at, ended_at,
    replayed)
SELECT task_id, lease_token, attempt, outcome, error, log, started_at, ended_at, replayed
FROM attempts_kept;
DROP TABLE attempts_kept;
CREATE INDEX attempts_ended ON attempts (ended_at, outcome);

CREATE TABLE journal (
    task_id TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    seq     INTEGER NOT NULL,
    call    TEXT NOT NULL,
    digest  BLOB NOT NULL,
    answer  BLOB NOT NULL,
    summary TEXT NOT NULL,
    outside INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    at      INTEGER NOT NULL,
    took_us INTEGER NOT NULL,
    PRIMARY KEY (task_id, seq)
) STRICT;
INSERT INTO journal (task_id, seq, call, digest, answer, summary, outside, attempt, at, took_us)
SELECT task_id, seq, call, digest, answer, summary, outside, attempt, at, took_us
FROM journal_kept;
DROP TABLE journal_kept;
