-- Debounce: a task scheduled with a debounce window has `debounced` set.
-- While it waits for its first enqueue (new, not held by a gate, not
-- parked), it is its key's one debounced task: a later debounced task of
-- the key collapses into it — the insert's conflict on this unique index
-- updates it with the later request and a later trigger, and answers its
-- id. Once enqueued (or held, parked, cancelled) it leaves the index and
-- the next debounced task of the key starts anew. Keep in step with
-- ../sqlite.
ALTER TABLE tasks ADD COLUMN debounced BOOLEAN NOT NULL DEFAULT FALSE;
CREATE UNIQUE INDEX tasks_debounce ON tasks (lambda, key)
    WHERE debounced AND status = 'new' AND NOT held AND NOT parked;
