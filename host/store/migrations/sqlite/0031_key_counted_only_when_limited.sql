-- A task's key is counted only in a lambda that limits its keys (a
-- concurrency per key, or fairness): `limited` says its lambda did when the
-- poll last enqueued, paced or parked it (or its insert stored it parked),
-- and a deploy or rollback that changes whether it does sets it anew on the
-- lambda's tasks in flight, with every poll locked out. Keys of a lambda
-- without such a limit then cost no entry in the index of tasks in flight,
-- and no lookup of the lambda's limits at each change of state. Every
-- unfinished keyed task of a limited lambda starts counted: one unparked
-- and not yet polled holds a place its key gave it.
ALTER TABLE tasks ADD COLUMN limited INTEGER NOT NULL DEFAULT 0;
UPDATE tasks SET limited = 1
WHERE key IS NOT NULL
    AND status IN ('new', 'enqueued', 'claimed', 'processing', 'suspended', 'retriable_failure')
    AND lambda IN (SELECT l.name FROM lambdas l JOIN lambda_versions v
        ON v.lambda = l.name AND v.version = l.current_version
        WHERE v.key_concurrency IS NOT NULL OR v.key_fairness IS NOT NULL);
DROP INDEX tasks_in_flight;
CREATE INDEX tasks_in_flight ON tasks (lambda, key, status)
    WHERE limited AND status IN ('enqueued', 'claimed', 'processing');
DROP TRIGGER tasks_landed;
CREATE TRIGGER tasks_landed AFTER UPDATE OF status ON tasks
WHEN NEW.limited AND NEW.parked = 0
    AND (NEW.status NOT IN ('enqueued', 'claimed', 'processing')
        OR (OLD.status = 'enqueued' AND NEW.status <> 'enqueued'))
    AND EXISTS (SELECT 1 FROM lambdas l JOIN lambda_versions v
        ON v.lambda = l.name AND v.version = l.current_version
        WHERE l.name = NEW.lambda AND (
            (v.key_concurrency IS NOT NULL
                AND NEW.status NOT IN ('enqueued', 'claimed', 'processing'))
            OR (v.key_fairness IS NOT NULL
                AND OLD.status NOT IN ('claimed', 'processing'))))
BEGIN
    INSERT INTO key_landings (lambda, key) VALUES (NEW.lambda, NEW.key);
END;
