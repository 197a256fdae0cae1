-- A continuation declared when the task was scheduled: on its success, a
-- task of another lambda with its output as payload, as its child. JSON:
-- {"lambda": ..., "collection": ..., "priority": ...}. Keep in step with
-- ../postgres.
ALTER TABLE tasks ADD COLUMN continuation TEXT;
