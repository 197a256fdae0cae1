-- Fan-in: a task suspended waiting for children it scheduled to end
-- (`wait_kind = 'children'`). `awaits` holds the children of its wait
-- that had not ended when it was suspended; a child's end deletes its row,
-- and the end that deletes the last one wakes the task, so a child ending
-- costs its parent a row, not a look at all its siblings. The awaiting
-- task's row is locked by its suspension and by each of its children's
-- ends (see sql/fan_in.rs), so neither misses the other.
-- tests/schema.rs holds this file and the other backend's 0018 to one
-- schema.
CREATE TABLE awaits (
    task_id  TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    child_id TEXT NOT NULL,
    PRIMARY KEY (task_id, child_id)
);

-- The overview counts the suspended tasks that wait for their children
-- apart from those asleep or waiting for a signal.
CREATE INDEX tasks_waiting_for_children ON tasks (lambda, due_at)
    WHERE (status = 'suspended') AND (wait_kind = 'children');
