-- The last version and secrets version of each deleted lambda, by name. A
-- lambda deployed again under the name starts past them, so a version
-- number or a secrets version never names two lambdas: an executor that
-- keeps a version's code, grants and limits, or a lambda's secrets, by
-- those numbers cannot hand one lambda's to the other. The row goes when
-- the name is deployed again (the new lambda then carries the numbers).
CREATE TABLE deleted_lambdas (
    name TEXT PRIMARY KEY,
    last_version INTEGER NOT NULL,
    secrets_version INTEGER NOT NULL
) STRICT;
