-- Components compiled at deploy, one per engine fingerprint, sealed by the
-- Frontend that compiled them: executors load these instead of compiling.
-- Deleted with their component. Keep in step with the other backend's 0013.
CREATE TABLE artifacts (
    digest     TEXT NOT NULL REFERENCES components (digest) ON DELETE CASCADE,
    engine     TEXT NOT NULL,
    bytes      BLOB NOT NULL,
    seal       BLOB NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (digest, engine)
);
