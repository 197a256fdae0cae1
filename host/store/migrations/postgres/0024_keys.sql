-- Keys: a task's key within its lambda (a customer, an account, a
-- document), NULL for a task that has none, and a periodic schedule's key
-- for the tasks it makes. The index serves a list (paged by id) or a count
-- by key; tasks without a key have no entry in it, and a task's entry
-- never changes (no column of it does), so keys cost a state change
-- nothing.
ALTER TABLE tasks ADD COLUMN key TEXT;
ALTER TABLE crons ADD COLUMN key TEXT;
CREATE INDEX tasks_key ON tasks (lambda, key, id) WHERE key IS NOT NULL;
