-- Retention: ended tasks are pruned some time after they end.
-- A lambda's own retention, per version like the rest of its configuration
-- (JSON: end name to milliseconds, null for forever; NULL when it keeps the
-- installation's).
ALTER TABLE lambda_versions ADD COLUMN retention TEXT;

-- The pruner finds the oldest ended tasks of each end, for one lambda or
-- for all.
CREATE INDEX tasks_finished ON tasks (status, finished_at) WHERE finished_at IS NOT NULL;

-- One holder at a time of a duty across the processes sharing the store
-- (the pruner): a lease by name, taken over once `until` has passed.
CREATE TABLE duties (
    name   TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    until  BIGINT NOT NULL
);
