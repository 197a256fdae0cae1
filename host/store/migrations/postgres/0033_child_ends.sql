-- The ends of children deleted while their parent may still read them: a
-- lambda deleted (with its tasks, or once they ended) or a dead letter
-- purged takes the tasks' rows, but a live parent of another lambda still
-- waits for, or will read, how each of its children ended. Each such child
-- leaves its end here (a child deleted before it ended reads as dropped,
-- with why), read by the parent's waits as a child's row would be, and
-- deleted with the parent. No key to `tasks`: the store deletes these rows
-- itself with the parent, as it does a task's other rows.
-- tests/schema.rs holds this file and the other backend's 0033 to one
-- schema.
CREATE TABLE child_ends (
    child_id   TEXT NOT NULL PRIMARY KEY,
    parent_id  TEXT NOT NULL,
    status     TEXT NOT NULL,
    output     BYTEA,
    last_error TEXT
);

CREATE INDEX child_ends_parent ON child_ends (parent_id);
