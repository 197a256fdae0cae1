-- Free text is kept escaped from now on: NUL (which Postgres's text cannot
-- hold) as \0 and a backslash as \\ (see `text_in` in src/support.rs).
-- Text written before is escaped here so it reads back as it was.
-- Keep in step with ../postgres.
UPDATE tasks SET progress = replace(progress, '\', '\\') WHERE instr(progress, '\') > 0;
UPDATE tasks SET last_error = replace(last_error, '\', '\\') WHERE instr(last_error, '\') > 0;
UPDATE tasks SET log = replace(log, '\', '\\') WHERE instr(log, '\') > 0;
UPDATE tasks SET idempotency_key = replace(idempotency_key, '\', '\\')
    WHERE instr(idempotency_key, '\') > 0;
UPDATE attempts SET error = replace(error, '\', '\\') WHERE instr(error, '\') > 0;
UPDATE attempts SET log = replace(log, '\', '\\') WHERE instr(log, '\') > 0;
UPDATE tokens SET name = replace(name, '\', '\\') WHERE instr(name, '\') > 0;

-- A held task now always waits (new, or retriable_failure after an attempt)
-- and an ended one is never held. Earlier versions held tasks in any status.
UPDATE tasks SET held = FALSE
    WHERE held AND status IN ('success', 'fatal_failure', 'dead', 'dropped', 'cancelled');
UPDATE tasks SET status = CASE WHEN attempt = 0 THEN 'new' ELSE 'retriable_failure' END,
    enqueue_token = enqueue_token + 1
    WHERE held AND status IN ('enqueued', 'claimed', 'processing');
