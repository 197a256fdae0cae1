-- A task's lambda is checked once a batch, by the insert's read of the
-- lambda under `FOR KEY SHARE` (src/sql/lambda.rs, `require_lambda_for_tasks`),
-- which a delete of the lambda waits for: the foreign key checked it on
-- every row, nearly doubling what a task's insert costs Postgres.
ALTER TABLE tasks DROP CONSTRAINT tasks_lambda_fkey;
