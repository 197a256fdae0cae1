-- The execution that ends a task in success or for good (`fatal_failure`)
-- is no longer a row of `attempts`: the task's row holds it (its attempt,
-- lease, start, end, log and error), and this column the journal entries
-- it replayed. Rows written before stay; readers take the row when there
-- is one.
ALTER TABLE tasks ADD COLUMN replayed INTEGER NOT NULL DEFAULT 0;
