-- Traces: the W3C trace context a task's spans join (its `schedule` span's,
-- or its client's when traces are off), NULL for a task that has none.
-- Continuations copy their parent's.
ALTER TABLE tasks ADD COLUMN traceparent TEXT;
ALTER TABLE tasks ADD COLUMN tracestate TEXT;
