-- Keys: a task's key within its lambda (a customer, an account, a
-- document), NULL for a task that has none, and a periodic schedule's key
-- for the tasks it makes. The index serves a list or a count by key and the
-- limits per key, which count a key's tasks by status; tasks without a key
-- have no entry in it.
ALTER TABLE tasks ADD COLUMN key TEXT;
ALTER TABLE crons ADD COLUMN key TEXT;
CREATE INDEX tasks_key ON tasks (lambda, key, status) WHERE key IS NOT NULL;
