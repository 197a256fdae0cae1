-- Signals: what clients send a task by name (SignalTask), kept until the
-- task ends so that one sent before the task waits for it is delivered when
-- it does. A task's signals are numbered from 0 in the order they arrived;
-- an execution takes the next one of a name it has not yet taken (the
-- journal says which it took). tests/schema.rs holds this file and the
-- other backend's 0017 to one schema.
CREATE TABLE signals (
    task_id TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    seq     BIGINT NOT NULL,
    name    TEXT NOT NULL,
    payload BYTEA NOT NULL,
    sent_at BIGINT NOT NULL,
    PRIMARY KEY (task_id, seq)
);

-- What a suspended task waits for besides its time: a timer alone, a
-- signal (its name in `wait_signal`; a signal of that name wakes it), or
-- its children (the fan-in's, checked for now so that it will need no
-- rebuild of `tasks` in SQLite). NULL while the task is not suspended.
-- Added with no default, which rewrites no row.
ALTER TABLE tasks ADD COLUMN wait_kind TEXT
    CHECK (wait_kind IN ('timer', 'signal', 'children'));
ALTER TABLE tasks ADD COLUMN wait_signal TEXT;

-- The overview counts the suspended tasks that wait for a signal apart
-- from those asleep: an index of just those, by lambda.
CREATE INDEX tasks_waiting_for_signal ON tasks (lambda, due_at)
    WHERE (status = 'suspended') AND (wait_kind = 'signal');
