-- Postgres makes a change a poll counts (a limited task leaving flight, the
-- queue of a fair lambda, or the slot it was given) wait for a running
-- poll in this migration, so that it commits wholly before or after the
-- poll. SQLite writes one transaction at a time: nothing commits inside a
-- poll.
SELECT 1;
