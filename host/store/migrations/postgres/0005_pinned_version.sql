-- A task may be pinned to a version of its lambda; NULL runs the version
-- current when the task is claimed. Pinned versions are kept by the version
-- garbage collection while the task may still run. Keep in step with
-- ../sqlite.
ALTER TABLE tasks ADD COLUMN version BIGINT;
