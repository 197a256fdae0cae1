-- Journal writes that land in turn and whole (src/sql/journal.rs).
-- tests/schema.rs holds this file and the other backend's 0034 to one
-- schema.
--
-- An execution numbers the messages of its journal writes; a task counts
-- those it took under the lease `journal_lease` (NULL before the first),
-- and takes each only in its turn: a late copy of an earlier one is
-- refused instead of undoing what came after it. Each column is added
-- with a constant default or none, which rewrites no row.
ALTER TABLE tasks ADD COLUMN journal_lease BIGINT;
ALTER TABLE tasks ADD COLUMN journal_writes BIGINT NOT NULL DEFAULT 0;

-- The parts of a journal write larger than one message, staged until its
-- last part replaces the journal with them in one transaction: an
-- execution that dies between parts leaves the journal as it was. No read
-- sees them. Rows as `journal`'s (0015); they go with their task.
CREATE TABLE journal_staged (
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
