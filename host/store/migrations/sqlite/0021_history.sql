-- Task history: per lambda and minute, the executions that ended and how,
-- and the sampled queue depth, for the dashboard's charts. Ended tasks are
-- pruned, so the history is kept apart, a row per lambda and minute that
-- the HSCs add their in-memory counts to every few seconds.
CREATE TABLE task_minutes (
    lambda    TEXT NOT NULL,
    -- The minute's start, in Unix milliseconds.
    minute    INTEGER NOT NULL,
    succeeded INTEGER NOT NULL DEFAULT 0,
    failed    INTEGER NOT NULL DEFAULT 0,
    -- Of the failed, those whose task then died (out of attempts).
    dead      INTEGER NOT NULL DEFAULT 0,
    -- Tasks due and waiting to start, as sampled once in the minute; NULL
    -- when no sample was taken.
    depth     INTEGER,
    PRIMARY KEY (lambda, minute)
) STRICT;

-- The overall charts and the history's pruning read by minute.
CREATE INDEX task_minutes_minute ON task_minutes (minute);

-- The schedule-to-start latency of each lambda and minute: a histogram
-- whose bucket b holds the latencies in [2^(b-1), 2^b) ms (bucket 0: under
-- 1 ms), a row per bucket that holds any, so histograms merge by adding.
CREATE TABLE task_latency (
    lambda TEXT NOT NULL,
    minute INTEGER NOT NULL,
    bucket INTEGER NOT NULL,
    n      INTEGER NOT NULL,
    PRIMARY KEY (lambda, minute, bucket)
) STRICT;

CREATE INDEX task_latency_minute ON task_latency (minute);
