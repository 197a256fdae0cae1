-- Rate per key: a lambda's token bucket per key (`key_rate_count` starts a
-- `key_rate_period_ms`; NULL: none). Each key's next free slot is a row of
-- `key_pace`, locked while a poll gives slots out, so every consumer shares
-- one bucket per key; a task given a later slot waits for it with
-- `key_paced` set, so it does not take a second slot of its key when it
-- comes due (it may still wait for its lambda's quota, with `paced`). A
-- row whose slot lies a day (the longest period) in the past says no more
-- than no row, and the pruner deletes it. Keep in step with ../postgres.
ALTER TABLE lambda_versions ADD COLUMN key_rate_count INTEGER;
ALTER TABLE lambda_versions ADD COLUMN key_rate_period_ms INTEGER;
ALTER TABLE tasks ADD COLUMN key_paced INTEGER NOT NULL DEFAULT 0;
CREATE TABLE key_pace (
    lambda       TEXT NOT NULL,
    key          TEXT NOT NULL,
    next_slot_at REAL NOT NULL,
    PRIMARY KEY (lambda, key)
);
CREATE INDEX key_pace_slot ON key_pace (next_slot_at);
