-- Postgres drops the foreign keys from a task's attempts, journal, signals
-- and awaits to the task (see its 0023): every statement that deletes a
-- task deletes those rows itself, in the task's transaction. SQLite keeps
-- them: they are checked in-process, cheaply, and dropping one here means
-- rebuilding the table. Nothing changes.
SELECT 1;
