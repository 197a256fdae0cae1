-- What the dashboard reads at millions of tasks. The overview groups the
-- unfinished and dead tasks (ended ones stay out of `tasks_live`, so it
-- does not grow with history) and the executions that ended in the last
-- hour; task lists filtered by collection page through `tasks_collection`.
-- Keep in step with the other backend's 0012.
CREATE INDEX tasks_live ON tasks (lambda, priority, status, held, due_at)
    WHERE status IN ('new', 'enqueued', 'claimed', 'processing', 'retriable_failure', 'dead');
CREATE INDEX attempts_ended ON attempts (ended_at, outcome);
CREATE INDEX tasks_collection ON tasks (lambda, collection, id);
