-- Durable lambdas wait without holding an instance: a task whose execution
-- ended in a long wait is `suspended` until the wait is over, and that
-- execution's attempt is recorded as `suspended`. tests/schema.rs holds
-- this file and the other backend's 0016 to one schema.
--
-- The checks are replaced NOT VALID and validated after, so no scan runs
-- under the exclusive lock; `tasks_live` (the live states) is rebuilt with
-- the new one.
ALTER TABLE tasks DROP CONSTRAINT tasks_status_check;
ALTER TABLE tasks ADD CONSTRAINT tasks_status_check
    CHECK (status IN ('new', 'enqueued', 'claimed', 'processing', 'suspended', 'retriable_failure', 'success', 'fatal_failure', 'dead', 'dropped', 'cancelled')) NOT VALID;
ALTER TABLE attempts DROP CONSTRAINT attempts_outcome_check;
ALTER TABLE attempts ADD CONSTRAINT attempts_outcome_check
    CHECK (outcome IN ('success', 'retriable', 'fatal', 'lost', 'suspended')) NOT VALID;
ALTER TABLE tasks VALIDATE CONSTRAINT tasks_status_check;
ALTER TABLE attempts VALIDATE CONSTRAINT attempts_outcome_check;

DROP INDEX tasks_live;
CREATE INDEX tasks_live ON tasks (lambda, priority, status, held, due_at)
    WHERE status IN ('new', 'enqueued', 'claimed', 'processing', 'suspended', 'retriable_failure', 'dead');
