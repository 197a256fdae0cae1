-- Every execution of a task that ended: how, with what error and log. A
-- dead letter is inspected through it (`waft dlq show`). Keyed by lease
-- token, which each claim makes anew, so a redriven task's attempts (numbered
-- from 1 again) join the earlier ones. Keep in step with ../postgres.
CREATE TABLE attempts (
    task_id     TEXT NOT NULL REFERENCES tasks (id),
    lease_token INTEGER NOT NULL,
    attempt     INTEGER NOT NULL,
    -- success, retriable, fatal, or lost (the executor stopped heartbeating).
    outcome     TEXT NOT NULL,
    error       TEXT,
    log         TEXT,
    started_at  INTEGER,
    ended_at    INTEGER NOT NULL,
    PRIMARY KEY (task_id, lease_token)
) STRICT;
