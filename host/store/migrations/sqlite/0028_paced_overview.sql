-- The overview counts tasks waiting for a slot of their lambda's quota or
-- their key's rate apart from the ready ones, from the index of live tasks
-- alone: it holds `paced` and `key_paced` now. Keep in step with
-- ../postgres.
DROP INDEX tasks_live;
CREATE INDEX tasks_live ON tasks (lambda, priority, status, held, parked, paced, key_paced, due_at)
    WHERE status IN ('new', 'enqueued', 'claimed', 'processing', 'suspended', 'retriable_failure', 'dead');
