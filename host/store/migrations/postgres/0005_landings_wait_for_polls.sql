-- A change a poll counts commits wholly before or after a poll that
-- decides by limits, never between its statements. A poll reads, each
-- statement at its own moment (READ COMMITTED), the keys' landing marks
-- (and unparks by them), then its due tasks, then each key's tasks in
-- flight to admit them: a landing committing in between freed a place the
-- admission gave to a due task while the key's older parked task, whose
-- mark the poll had not read, stayed parked — a state no order of the two
-- gives.
--
-- Only polls put tasks in flight (and give slots of a quota or a key's
-- rate), under the keys' lock (advisory lock 7240, src/dialect.rs) held
-- exclusively while any lambda has a limit; so what a poll counts can only
-- go down beside it: a counted task leaving flight, the queue of a fair
-- lambda, or the slot it was given. The trigger's function now takes that
-- lock shared for such a change, in the changing transaction: the change
-- waits for a running poll to commit, and a poll waits for such changes
-- under way. A change of a task that holds no place (parked, suspended,
-- new) takes no lock: the rows a poll waits for (the parked tasks it
-- unparks, the parents of the children it ends) are never held by a
-- transaction that waits for it.
CREATE OR REPLACE FUNCTION tasks_landed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM lambdas l JOIN lambda_versions v
        ON v.lambda = l.name AND v.version = l.current_version
        WHERE l.name = NEW.lambda AND (
            (v.key_concurrency IS NOT NULL
                AND NEW.status NOT IN ('enqueued', 'claimed', 'processing'))
            OR (v.key_fairness IS NOT NULL
                AND OLD.status NOT IN ('claimed', 'processing')))) THEN
        IF OLD.status IN ('enqueued', 'claimed', 'processing')
            OR ((OLD.paced OR OLD.key_paced) AND NOT OLD.parked) THEN
            PERFORM pg_advisory_xact_lock_shared(7240);
        END IF;
        INSERT INTO key_landings (lambda, key) VALUES (NEW.lambda, NEW.key);
    END IF;
    RETURN NULL;
END
$$;
