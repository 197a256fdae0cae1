-- The database refuses a state it does not know: every column that names a
-- state (a task's status, an attempt's outcome, a gate's state, a token's
-- role) is checked against the model's names (src/rows.rs holds these
-- lists to waft_core's enums by a test). And periodic schedules are crons
-- here too, as everywhere else: `schedules` becomes `crons`, `schedule_id`
-- becomes `cron_id`, and an occurrence's idempotency key `schedule:CRON:AT`
-- becomes `cron:CRON:AT`. tests/schema.rs holds this file and the other
-- backend's 0014 to one schema.

-- Each check is added NOT VALID (no scan under the table's exclusive lock)
-- and validated after, which reads the rows under a lock that lets writes
-- go on.
ALTER TABLE tasks ADD CONSTRAINT tasks_status_check
    CHECK (status IN ('new', 'enqueued', 'claimed', 'processing', 'retriable_failure', 'success', 'fatal_failure', 'dead', 'dropped', 'cancelled')) NOT VALID;
ALTER TABLE attempts ADD CONSTRAINT attempts_outcome_check
    CHECK (outcome IN ('success', 'retriable', 'fatal', 'lost')) NOT VALID;
ALTER TABLE gates ADD CONSTRAINT gates_state_check
    CHECK (state IN ('open', 'paused', 'dropped')) NOT VALID;
ALTER TABLE tokens ADD CONSTRAINT tokens_role_check
    CHECK (role IN ('admin', 'owner', 'scheduler')) NOT VALID;
ALTER TABLE tasks VALIDATE CONSTRAINT tasks_status_check;
ALTER TABLE attempts VALIDATE CONSTRAINT attempts_outcome_check;
ALTER TABLE gates VALIDATE CONSTRAINT gates_state_check;
ALTER TABLE tokens VALIDATE CONSTRAINT tokens_role_check;

ALTER TABLE schedules RENAME TO crons;
ALTER TABLE crons RENAME CONSTRAINT schedules_pkey TO crons_pkey;
ALTER TABLE crons RENAME CONSTRAINT schedules_lambda_fkey TO crons_lambda_fkey;
ALTER INDEX schedules_next_at RENAME TO crons_next_at;
ALTER TABLE tasks RENAME COLUMN schedule_id TO cron_id;

-- Occurrences made before keep their key under the new prefix, so none is
-- made again; a key some client took meanwhile is left as it was.
UPDATE tasks SET idempotency_key = 'cron:' || substr(idempotency_key, 10)
    WHERE cron_id IS NOT NULL AND substr(idempotency_key, 1, 9) = 'schedule:'
    AND NOT EXISTS (SELECT 1 FROM tasks other WHERE other.lambda = tasks.lambda
        AND other.idempotency_key = 'cron:' || substr(tasks.idempotency_key, 10));
