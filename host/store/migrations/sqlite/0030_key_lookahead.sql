-- A fair lambda's lookahead: how many of a key's tasks (of weight 1) wait
-- in the queue at once, the rest parked; NULL reads as the default, 100
-- (as a Frontend of an earlier release leaves it). Versions deployed fair
-- before keep 500, the lookahead of that time.
ALTER TABLE lambda_versions ADD COLUMN key_lookahead INTEGER;
UPDATE lambda_versions SET key_lookahead = 500 WHERE key_fairness IS NOT NULL;
