-- Fairness between keys: a lambda's weights of the keys it names (a JSON
-- object; NULL: first come, first served). The poll keeps at most a
-- lookahead of a fair key's tasks enqueued (waiting in the queue) and
-- parks the rest, marking `awaits_turn` to say why; a task of a fair key
-- leaving the queue (claimed, or ended there) marks its key in
-- `key_landings`, for the next poll to unpark as many as there are places.
ALTER TABLE lambda_versions ADD COLUMN key_fairness TEXT;
ALTER TABLE tasks ADD COLUMN awaits_turn INTEGER NOT NULL DEFAULT 0;
-- The poll counts a key's tasks in flight and, of them, those enqueued,
-- from the index alone.
DROP INDEX tasks_in_flight;
CREATE INDEX tasks_in_flight ON tasks (lambda, key, status)
    WHERE key IS NOT NULL AND status IN ('enqueued', 'claimed', 'processing');
-- A fair key's tasks given a later slot of a quota or rate count in its
-- turn as its enqueued ones do: a backlog paced into slots ahead would
-- stand in front of other keys' tasks.
CREATE INDEX tasks_slotted ON tasks (lambda, key)
    WHERE key IS NOT NULL AND (paced OR key_paced) AND NOT parked
        AND status IN ('new', 'retriable_failure');
-- A key is marked when one of its tasks not parked lands (leaves flight)
-- and its lambda has a concurrency per key, or leaves the queue (a task
-- not parked changing state from anywhere but a running one, to anything
-- but enqueued) and its lambda is fair.
DROP TRIGGER tasks_landed;
CREATE TRIGGER tasks_landed AFTER UPDATE OF status ON tasks
WHEN NEW.key IS NOT NULL AND NEW.parked = 0
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
