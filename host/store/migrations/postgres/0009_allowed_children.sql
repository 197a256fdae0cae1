-- The other lambdas a lambda's executions may schedule children of, one
-- name per line (names hold no line breaks); empty: none but its own.
-- Versions deployed before could schedule children of any lambda; they keep
-- only their own, and are granted others by a new deploy (--allow-child).
-- Keep in step with ../sqlite.
ALTER TABLE lambda_versions ADD COLUMN allowed_children TEXT NOT NULL DEFAULT '';
