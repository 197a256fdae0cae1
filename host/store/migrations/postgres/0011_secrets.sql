-- Secrets of lambdas, sealed by the Frontend with the installation's key:
-- the store never holds one in clear. Not versioned with the lambda: a set
-- or a removal applies to the next task, and bumps the lambda's
-- secrets_version so executors know to read them again.
-- Keep in step with ../sqlite.
CREATE TABLE secrets (
    lambda TEXT NOT NULL REFERENCES lambdas (name),
    name TEXT NOT NULL,
    sealed BYTEA NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (lambda, name)
);
ALTER TABLE lambdas ADD COLUMN secrets_version BIGINT NOT NULL DEFAULT 0;
