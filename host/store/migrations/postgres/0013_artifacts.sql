-- Components compiled at deploy, one per engine fingerprint, sealed by the
-- Frontend that compiled them: executors load these instead of compiling.
-- Deleted with their component. Keep in step with the other backend's 0013.
CREATE TABLE artifacts (
    digest     TEXT NOT NULL REFERENCES components (digest) ON DELETE CASCADE,
    engine     TEXT NOT NULL,
    bytes      BYTEA NOT NULL,
    seal       BYTEA NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (digest, engine)
);
