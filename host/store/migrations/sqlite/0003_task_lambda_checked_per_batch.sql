-- Postgres drops the foreign key from a task to its lambda in this
-- migration and checks it once a batch under a lock. SQLite keeps it: it
-- writes one transaction at a time, checks a key in a lookup, and could
-- drop it only by rebuilding the table of tasks.
SELECT 1;
