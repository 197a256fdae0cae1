-- Concurrency per key: a lambda's limit on its tasks of one key in flight
-- (enqueued, claimed or processing; NULL: none). A due task whose key has
-- as many in flight waits parked (no trigger) until one of them lands
-- (leaves flight). A change of state outside flight of a task not parked
-- — a landing, or a woken task held by a gate, dropped, cancelled or paced
-- instead of taking its place — marks its key in `key_landings`, in the
-- same transaction, for the next poll to unpark as many of the key's
-- oldest parked tasks as there are places: a trigger, so that every such
-- change marks it, whichever statement makes it. Only keys of lambdas with
-- a limit are marked.
ALTER TABLE lambda_versions ADD COLUMN key_concurrency BIGINT;
ALTER TABLE tasks ADD COLUMN parked BOOLEAN NOT NULL DEFAULT FALSE;
-- A key's tasks in flight, as the poll counts them: a task has an entry
-- only while it is in flight.
CREATE INDEX tasks_in_flight ON tasks (lambda, key)
    WHERE key IS NOT NULL AND status IN ('enqueued', 'claimed', 'processing');
CREATE INDEX tasks_parked ON tasks (lambda, key, due_at, id) WHERE parked;
-- Marks are only ever added (a key may have several), never updated: a
-- landing's mark waits for nobody, and a poll consumes only the marks
-- committed before it reads them.
CREATE TABLE key_landings (
    lambda TEXT NOT NULL,
    key    TEXT NOT NULL
);
CREATE INDEX key_landings_key ON key_landings (lambda, key);
CREATE FUNCTION tasks_landed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM lambdas l JOIN lambda_versions v
        ON v.lambda = l.name AND v.version = l.current_version
        WHERE l.name = NEW.lambda AND v.key_concurrency IS NOT NULL) THEN
        INSERT INTO key_landings (lambda, key) VALUES (NEW.lambda, NEW.key);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER tasks_landed AFTER UPDATE OF status ON tasks FOR EACH ROW
WHEN (NEW.key IS NOT NULL AND NOT NEW.parked
    AND NEW.status NOT IN ('enqueued', 'claimed', 'processing'))
EXECUTE FUNCTION tasks_landed();
-- The overview counts parked tasks apart from the ready ones, from the
-- index of live tasks alone: it holds `parked` now.
DROP INDEX tasks_live;
CREATE INDEX tasks_live ON tasks (lambda, priority, status, held, parked, due_at)
    WHERE status IN ('new', 'enqueued', 'claimed', 'processing', 'suspended', 'retriable_failure', 'dead');
