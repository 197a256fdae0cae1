-- Rate per key: a lambda's token bucket per key (`key_rate_count` starts a
-- `key_rate_period_ms`; NULL: none). Each key's next free slot is a row of
-- `key_pace`, locked while a poll gives slots out, so every consumer shares
-- one bucket per key; a task given a later slot waits for it with
-- `key_paced` set, so it does not take a second slot of its key when it
-- comes due (it may still wait for its lambda's quota, with `paced`). A
-- row whose slot lies a day (the longest period) in the past says no more
-- than no row, and the pruner deletes it. Keep in step with ../sqlite.
ALTER TABLE lambda_versions ADD COLUMN key_rate_count BIGINT;
ALTER TABLE lambda_versions ADD COLUMN key_rate_period_ms BIGINT;
ALTER TABLE tasks ADD COLUMN key_paced BOOLEAN NOT NULL DEFAULT FALSE;
CREATE TABLE key_pace (
    lambda       TEXT NOT NULL,
    key          TEXT NOT NULL,
    next_slot_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (lambda, key)
);
CREATE INDEX key_pace_slot ON key_pace (next_slot_at);
