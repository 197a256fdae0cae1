-- Durable lambdas: each task keeps a journal of the host calls its
-- executions made and the answers they got, so that a retry replays it
-- instead of calling again (src/sql/journal.rs). tests/schema.rs holds this
-- file and the other backend's 0015 to one schema.
--
-- `call` and `summary` are free text, kept escaped as every other (see
-- `text_in` in src/support.rs: `text` cannot hold NUL); `digest` and
-- `answer` are bytes. An entry goes with its task.
CREATE TABLE journal (
    task_id TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    seq     BIGINT NOT NULL,
    call    TEXT NOT NULL,
    digest  BYTEA NOT NULL,
    answer  BYTEA NOT NULL,
    summary TEXT NOT NULL,
    outside BOOLEAN NOT NULL,
    attempt BIGINT NOT NULL,
    at      BIGINT NOT NULL,
    took_us BIGINT NOT NULL,
    PRIMARY KEY (task_id, seq)
);

-- Entries in the task's journal (its seq run 0 .. journal_len - 1), and the
-- version that wrote them (NULL while it is empty): a task with a journal
-- runs that version until a redrive discards the journal. Each column is
-- added with a constant default or none, which rewrites no row.
ALTER TABLE tasks ADD COLUMN journal_len BIGINT NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN journal_version BIGINT;
-- The version the latest claim handed out: what a result's journal write
-- pins, since a result does not say which version ran (a deploy may come
-- between the claim and the result). NULL before the task's first claim.
ALTER TABLE tasks ADD COLUMN claimed_version BIGINT;

-- Journal entries an execution was answered from before it ran live.
ALTER TABLE attempts ADD COLUMN replayed BIGINT NOT NULL DEFAULT 0;

-- What an attempt does when its calls stop matching the journal. Every
-- existing row takes the default, which passes the check.
ALTER TABLE lambda_versions ADD COLUMN on_divergence TEXT NOT NULL DEFAULT 'fail'
    CHECK (on_divergence IN ('fail', 'restart'));
