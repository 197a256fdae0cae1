-- API tokens. Only the SHA-256 of a token's secret is kept: the secret is
-- shown once, at creation. `lambdas` is a JSON array of the lambda names an
-- owner or scheduler token is limited to. Keep in step with ../postgres.
CREATE TABLE tokens (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    role       TEXT NOT NULL,
    lambdas    TEXT NOT NULL,
    hash       TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
) STRICT;
