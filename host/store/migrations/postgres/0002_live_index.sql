-- Fewer index entries rewritten per state change. Every change of a task's
-- status (the enqueue, the claim, the start, the result) rewrote its entry
-- in each index that holds its status: `tasks_status`, `tasks_lambda_status`
-- and `tasks_live`, half of what an insert and an enqueue cost in SQLite. Now
-- one index holds a live task's status, and ended tasks have indexes of
-- their own, written once when the task ends.
DROP INDEX tasks_status;
DROP INDEX tasks_lambda_status;

-- The live tasks (not ended for good): the dashboard's overview groups them
-- from this index alone, at millions of tasks (ended ones stay out, so it
-- does not grow with history), the backlog finds each lambda's oldest
-- ready task through it, and a list or count of a lambda's tasks in a live
-- state reads just those. It holds what the overview tells apart (held,
-- parked, paced by quota or by key), and the id a list pages by. Its
-- predicate spells the live set (`LIVE` of src/names.rs); a test holds it
-- to that set.
DROP INDEX tasks_live;
CREATE INDEX tasks_live ON tasks (lambda, status, priority, held, parked, paced, key_paced, due_at, id)
    WHERE status IN ('new', 'enqueued', 'claimed', 'processing', 'suspended', 'retriable_failure', 'dead');

-- Lists and counts of the ended tasks, by status and by lambda and status,
-- paged by id. A task enters them once, when it ends (its `finished_at` is
-- set: a state ended for good, or dead), and leaves when it is pruned or a
-- dead one is redriven. Their predicate, unlike a list of states, costs a
-- write that does not end a task next to nothing (`ENDED` of
-- src/names.rs; a test holds them to it).
CREATE INDEX tasks_ended ON tasks (status, id) WHERE finished_at IS NOT NULL;
CREATE INDEX tasks_lambda_ended ON tasks (lambda, status, id) WHERE finished_at IS NOT NULL;
