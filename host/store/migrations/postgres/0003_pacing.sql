-- Pacing of lambdas with a scheduling quota: the Store Consumer's poll
-- enqueues a lambda's tasks at most at its rate. `next_slot_at` is the
-- (fractional) Unix millisecond of the lambda's next free slot; a task
-- given a later slot waits for it with `paced` set, so it does not take a
-- second slot when it comes due. Keep in step with ../sqlite.
ALTER TABLE tasks ADD COLUMN paced BOOLEAN NOT NULL DEFAULT FALSE;

CREATE TABLE lambda_pace (
    lambda       TEXT PRIMARY KEY REFERENCES lambdas (name),
    next_slot_at DOUBLE PRECISION NOT NULL
);
