-- A task's attempts, journal, signals and awaits no longer reference the
-- task by foreign key. Every statement that deletes a task (the pruner, a
-- purge, a lambda's deletion: `sql/prune.rs`) deletes those rows itself,
-- in the task's transaction, with the task's row locked first; the keys
-- added nothing to that but four trigger queries per deleted task, which
-- were most of what pruning cost (a batch of 1,000 ran 4,000 of them).
-- SQLite keeps its keys: they are checked in-process, cheaply, and
-- dropping one there means rebuilding the table.
ALTER TABLE attempts DROP CONSTRAINT IF EXISTS attempts_task_id_fkey;
ALTER TABLE journal DROP CONSTRAINT IF EXISTS journal_task_id_fkey;
ALTER TABLE signals DROP CONSTRAINT IF EXISTS signals_task_id_fkey;
ALTER TABLE awaits DROP CONSTRAINT IF EXISTS awaits_task_id_fkey;
