-- What the last execution of a task logged, one record a line: kept for
-- `waft task get` and dead-letter inspection.
ALTER TABLE tasks ADD COLUMN log TEXT;
