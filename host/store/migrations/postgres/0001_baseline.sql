-- Waft's task store, Postgres flavour (`waft serve`, production): the
-- schema of release 0.1.0. `tests/schema.rs` holds it and the SQLite
-- flavour (../sqlite/0001_baseline.sql) to one schema.
--
-- Times are Unix milliseconds. Free text is kept escaped (NUL, which text
-- cannot hold, as \0, a backslash as \\: `text_in` in src/support.rs).

--------------------------------------------------------------------------
-- Lambdas: their code, their deployed versions and what each may do.
--------------------------------------------------------------------------

-- WebAssembly components by content digest, shared by the versions that
-- deploy the same bytes.
CREATE TABLE components (
    digest     TEXT PRIMARY KEY,
    bytes      BYTEA NOT NULL,
    created_at BIGINT NOT NULL
);

-- Components compiled at deploy, one per engine fingerprint, sealed by the
-- Frontend that compiled them: executors load these instead of compiling.
-- A cache: deleted with their component.
CREATE TABLE artifacts (
    digest     TEXT NOT NULL REFERENCES components (digest) ON DELETE CASCADE,
    engine     TEXT NOT NULL,
    bytes      BYTEA NOT NULL,
    seal       BYTEA NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (digest, engine)
);

-- A lambda and the version new tasks run. `secrets_version` grows with
-- every change of its secrets, so executors know to read them again.
CREATE TABLE lambdas (
    name            TEXT PRIMARY KEY,
    current_version BIGINT NOT NULL,
    created_at      BIGINT NOT NULL,
    secrets_version BIGINT NOT NULL DEFAULT 0
);

-- Every deployed version of a lambda: its component and configuration.
CREATE TABLE lambda_versions (
    lambda             TEXT NOT NULL REFERENCES lambdas (name),
    version            BIGINT NOT NULL,
    digest             TEXT NOT NULL REFERENCES components (digest),
    max_memory         BIGINT NOT NULL,
    timeout_ms         BIGINT NOT NULL,
    fuel               BIGINT,
    max_output         BIGINT NOT NULL,
    max_log            BIGINT NOT NULL,
    max_attempts       BIGINT NOT NULL,
    backoff_base_ms    BIGINT NOT NULL,
    backoff_factor     DOUBLE PRECISION NOT NULL,
    backoff_max_ms     BIGINT NOT NULL,
    priorities         BIGINT NOT NULL,
    default_priority   BIGINT NOT NULL,
    max_payload        BIGINT NOT NULL,
    concurrency        BIGINT NOT NULL,
    -- The lambda's scheduling quota, in tasks a second (NULL: none).
    quota_per_sec      DOUBLE PRECISION,
    created_at         BIGINT NOT NULL,
    -- The other lambdas its executions may schedule children of, one name
    -- a line (names hold no line breaks); empty: none but its own.
    allowed_children   TEXT NOT NULL DEFAULT '',
    -- What its executions may reach (outbound HTTP, configuration
    -- variables): the JSON of waft_core::Grants; '{}' grants nothing.
    grants             TEXT NOT NULL DEFAULT '{}',
    -- What an attempt does when its calls stop matching the journal.
    on_divergence      TEXT NOT NULL DEFAULT 'fail'
        CHECK (on_divergence IN ('fail', 'restart')),
    -- Its own retention of ended tasks (JSON: end name to milliseconds,
    -- null for forever; NULL: the installation's).
    retention          TEXT,
    -- Limits per key, NULL for none: tasks of one key in flight; a token
    -- bucket of `key_rate_count` a `key_rate_period_ms`; the weights of
    -- the keys it names (a JSON object; fairness between keys) and how
    -- many of a key's tasks of weight 1 wait in the queue at once (NULL
    -- reads as the default, 100).
    key_concurrency    BIGINT,
    key_rate_count     BIGINT,
    key_rate_period_ms BIGINT,
    key_fairness       TEXT,
    key_lookahead      BIGINT,
    PRIMARY KEY (lambda, version)
);

-- Secrets of lambdas, sealed by the Frontend with the installation's key:
-- the store never holds one in clear. Not versioned with the lambda: a set
-- or a removal applies to the next task.
CREATE TABLE secrets (
    lambda     TEXT NOT NULL REFERENCES lambdas (name),
    name       TEXT NOT NULL,
    sealed     BYTEA NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (lambda, name)
);

-- The last version and secrets version of each deleted lambda, by name. A
-- lambda deployed again under the name starts past them, so a version
-- number or a secrets version never names two lambdas: an executor that
-- keeps a version's code, grants and limits, or a lambda's secrets, by
-- those numbers cannot hand one lambda's to the other. The row goes when
-- the name is deployed again.
CREATE TABLE deleted_lambdas (
    name            TEXT PRIMARY KEY,
    last_version    BIGINT NOT NULL,
    secrets_version BIGINT NOT NULL
);

-- The queues of deleted lambdas, until a Store Consumer has deleted them
-- from the queue service (which the store's transaction cannot reach). A
-- lambda deployed again under the name keeps its queues: its row goes.
CREATE TABLE retired_queues (
    lambda TEXT PRIMARY KEY
);

--------------------------------------------------------------------------
-- Tasks.
--------------------------------------------------------------------------

-- Every column that names a state is checked against the model's names
-- (src/rows.rs holds these lists to waft_core's enums by a test): the
-- database refuses a state it does not know.
CREATE TABLE tasks (
    id                 TEXT PRIMARY KEY,
    lambda             TEXT NOT NULL REFERENCES lambdas (name),
    collection         TEXT NOT NULL,
    priority           BIGINT NOT NULL,
    payload            BYTEA NOT NULL,
    status             TEXT NOT NULL CHECK (status IN ('new', 'enqueued', 'claimed', 'processing', 'suspended', 'retriable_failure', 'success', 'fatal_failure', 'dead', 'dropped', 'cancelled')),
    attempt            BIGINT NOT NULL DEFAULT 0,
    max_attempts       BIGINT NOT NULL,
    scheduled_at       BIGINT NOT NULL,
    -- When the task should run next, kept while a gate holds it (a
    -- suspended task's: when its wait is over).
    due_at             BIGINT NOT NULL,
    -- When the Store Consumer looks at the task again; NULL when terminal,
    -- held or parked. Every state change sets it in the same statement.
    next_trigger_at    BIGINT,
    -- Held by a gate: a held task always waits (new, or retriable_failure
    -- after an attempt); an ended one is never held.
    held               BOOLEAN NOT NULL DEFAULT FALSE,
    enqueue_token      BIGINT NOT NULL DEFAULT 0,
    lease_token        BIGINT NOT NULL DEFAULT 0,
    created_at         BIGINT NOT NULL,
    enqueued_at        BIGINT,
    claimed_at         BIGINT,
    heartbeat_at       BIGINT,
    finished_at        BIGINT,
    progress           TEXT,
    last_error         TEXT,
    output             BYTEA,
    parent_id          TEXT,
    idempotency_key    TEXT,
    -- The cron schedule that made the task (its idempotency key is then
    -- `cron:CRON:AT`).
    cron_id            TEXT,
    -- What the last execution logged, one record a line.
    log                TEXT,
    -- Given a later slot of its lambda's quota: it waits for it, and does
    -- not take a second slot when it comes due.
    paced              BOOLEAN NOT NULL DEFAULT FALSE,
    -- The version the task is pinned to; NULL runs the version current
    -- when it is claimed.
    version            BIGINT,
    -- A continuation declared when the task was scheduled: on its success,
    -- a task of another lambda with its output as payload, as its child.
    -- JSON: {"lambda": ..., "collection": ..., "priority": ...}.
    continuation       TEXT,
    -- Entries in the task's journal (its seq run 0 .. journal_len - 1), and
    -- the version that wrote them (NULL while it is empty): a task with a
    -- journal runs that version until a redrive discards the journal.
    journal_len        BIGINT NOT NULL DEFAULT 0,
    journal_version    BIGINT,
    -- The version the latest claim handed out: what a result's journal
    -- write pins, since a result does not say which version ran.
    claimed_version    BIGINT,
    -- What a suspended task waits for besides its time: a timer alone, a
    -- signal (its name in `wait_signal`), or its children (`awaits`). NULL
    -- while the task is not suspended.
    wait_kind          TEXT
        CHECK (wait_kind IN ('timer', 'signal', 'children')),
    wait_signal        TEXT,
    -- The W3C trace context the task's spans join; NULL for none.
    traceparent        TEXT,
    tracestate         TEXT,
    -- The task's key within its lambda (a customer, an account, a
    -- document); NULL for none.
    key                TEXT,
    -- Waiting, with no trigger, for a place of its key (its concurrency or
    -- its turn among fair keys).
    parked             BOOLEAN NOT NULL DEFAULT FALSE,
    -- Given a later slot of its key's rate: it waits for it, and does not
    -- take a second slot of its key when it comes due.
    key_paced          BOOLEAN NOT NULL DEFAULT FALSE,
    -- Scheduled with a debounce window (see `tasks_debounce`).
    debounced          BOOLEAN NOT NULL DEFAULT FALSE,
    -- Parked for its key's turn among fair keys (rather than its
    -- concurrency).
    awaits_turn        BOOLEAN NOT NULL DEFAULT FALSE,
    -- Its key is counted: its lambda limited keys (a concurrency per key,
    -- or fairness) when the poll last enqueued, paced or parked it. A
    -- deploy or rollback that changes whether the lambda does sets it anew
    -- on its tasks in flight, with every poll locked out.
    limited            BOOLEAN NOT NULL DEFAULT FALSE,
    -- An execution numbers the messages of its journal writes; the task
    -- counts those it took under the lease `journal_lease` (NULL before the
    -- first) and takes each only in its turn: a late copy of an earlier one
    -- is refused instead of undoing what came after it.
    journal_lease      BIGINT,
    journal_writes     BIGINT NOT NULL DEFAULT 0,
    -- The generation of the journal: a journal discarded (a redrive
    -- `--fresh` or onto a version, `--on-divergence restart`) starts the
    -- next, which names its children anew (a child's id and key come from
    -- its parent's id, generation and rank). Stored: an empty journal
    -- cannot tell a new generation from entries never written.
    journal_generation BIGINT NOT NULL DEFAULT 0
);

-- The poll reads due tasks in trigger order: its cost follows the number of
-- due tasks, not the table's size.
CREATE INDEX tasks_next_trigger ON tasks (next_trigger_at) WHERE next_trigger_at IS NOT NULL;
CREATE UNIQUE INDEX tasks_idempotency ON tasks (lambda, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX tasks_lambda_status ON tasks (lambda, status, id);
CREATE INDEX tasks_status ON tasks (status, id);
CREATE INDEX tasks_parent ON tasks (parent_id) WHERE parent_id IS NOT NULL;
-- A gate opened releases its held tasks in due order.
CREATE INDEX tasks_held ON tasks (lambda, collection, due_at) WHERE held;
-- Task lists filtered by collection page through it.
CREATE INDEX tasks_collection ON tasks (lambda, collection, id);
-- The dashboard's overview groups the unfinished and dead tasks from this
-- index alone, at millions of tasks: ended ones stay out, so it does not
-- grow with history. It holds what the overview tells apart (held, parked,
-- paced by quota or by key). Its predicate spells the live set (`LIVE`
-- of src/names.rs); a test holds it to that set.
CREATE INDEX tasks_live ON tasks (lambda, priority, status, held, parked, paced, key_paced, due_at)
    WHERE status IN ('new', 'enqueued', 'claimed', 'processing', 'suspended', 'retriable_failure', 'dead');
-- The overview counts the suspended tasks that wait for a signal, and
-- those that wait for their children, apart from those asleep.
CREATE INDEX tasks_waiting_for_signal ON tasks (lambda, due_at)
    WHERE (status = 'suspended') AND (wait_kind = 'signal');
CREATE INDEX tasks_waiting_for_children ON tasks (lambda, due_at)
    WHERE (status = 'suspended') AND (wait_kind = 'children');
-- The pruner finds the oldest ended tasks of each end.
CREATE INDEX tasks_finished ON tasks (status, finished_at) WHERE finished_at IS NOT NULL;

-- A task's attempts, journal, signals and awaits have no foreign key to the
-- task: every statement that deletes a task (the pruner, a purge, a
-- lambda's deletion: src/sql/prune.rs) deletes those rows itself, in the
-- task's transaction, with the task's row locked first. The keys' triggers
-- would be most of what pruning costs (four queries per deleted task).

-- Every execution of a task that ended: how, with what error and log. A
-- dead letter is inspected through it (`waft dlq show`). Keyed by lease
-- token, which each claim makes anew, so a redriven task's attempts
-- (numbered from 1 again) join the earlier ones. `replayed`: the journal
-- entries the execution was answered from before it ran live.
CREATE TABLE attempts (
    task_id     TEXT NOT NULL,
    lease_token BIGINT NOT NULL,
    attempt     BIGINT NOT NULL,
    -- lost: the executor stopped heartbeating; suspended: it ended in a
    -- long wait.
    outcome     TEXT NOT NULL CHECK (outcome IN ('success', 'retriable', 'fatal', 'lost', 'suspended')),
    error       TEXT,
    log         TEXT,
    started_at  BIGINT,
    ended_at    BIGINT NOT NULL,
    replayed    BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (task_id, lease_token)
);

-- The overview reads the executions that ended in the last hour.
CREATE INDEX attempts_ended ON attempts (ended_at, outcome);

--------------------------------------------------------------------------
-- Durable execution: journals, signals, fan-in (docs/durable.md).
--------------------------------------------------------------------------

-- Each task's journal of the host calls its executions made and the
-- answers they got, so that a retry replays it instead of calling again.
-- `call` and `summary` are free text, kept escaped; `digest` and `answer`
-- are bytes.
CREATE TABLE journal (
    task_id TEXT NOT NULL,
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

-- The parts of a journal write larger than one message, staged until its
-- last part replaces the journal with them in one transaction: an
-- execution that dies between parts leaves the journal as it was. No read
-- sees them.
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

-- What clients send a task by name, kept until the task ends so that one
-- sent before the task waits for it is delivered when it does. Numbered
-- from 0 in the order they arrived; an execution takes the next one of a
-- name it has not yet taken (the journal says which it took).
CREATE TABLE signals (
    task_id TEXT NOT NULL,
    seq     BIGINT NOT NULL,
    name    TEXT NOT NULL,
    payload BYTEA NOT NULL,
    sent_at BIGINT NOT NULL,
    PRIMARY KEY (task_id, seq)
);

-- Fan-in: the children a suspended task waits for that had not ended when
-- it was suspended. A child's end deletes its row, and the end that deletes
-- the last one wakes the task, so a child ending costs its parent a row,
-- not a look at all its siblings.
CREATE TABLE awaits (
    task_id  TEXT NOT NULL,
    child_id TEXT NOT NULL,
    PRIMARY KEY (task_id, child_id)
);

-- The ends of children deleted while their parent may still read them (a
-- lambda deleted, a dead letter purged): read by the parent's waits as a
-- child's row would be, and deleted with the parent (a child deleted before
-- it ended reads as dropped, with why). No key to `tasks`: the store
-- deletes these rows itself with the parent.
CREATE TABLE child_ends (
    child_id   TEXT NOT NULL PRIMARY KEY,
    parent_id  TEXT NOT NULL,
    status     TEXT NOT NULL,
    output     BYTEA,
    last_error TEXT
);

CREATE INDEX child_ends_parent ON child_ends (parent_id);

--------------------------------------------------------------------------
-- Keys: limits and debounce per key within a lambda.
--------------------------------------------------------------------------

-- A list (paged by id) or a count by key. Tasks without a key have no
-- entry, and a task's entry never changes, so keys cost a state change
-- nothing.
CREATE INDEX tasks_key ON tasks (lambda, key, id) WHERE key IS NOT NULL;
-- A counted key's tasks in flight and, of them, those enqueued, as the poll
-- counts them from the index alone: a task has an entry only while it is
-- in flight (the set `IN_FLIGHT` of src/names.rs; a test holds it to it).
CREATE INDEX tasks_in_flight ON tasks (lambda, key, status)
    WHERE limited AND status IN ('enqueued', 'claimed', 'processing');
-- A key's parked tasks, oldest first, for the poll to unpark.
CREATE INDEX tasks_parked ON tasks (lambda, key, due_at, id) WHERE parked;
-- A fair key's tasks given a later slot of a quota or rate count in its
-- turn as its enqueued ones do: a backlog paced into slots ahead would
-- stand in front of other keys' tasks.
CREATE INDEX tasks_slotted ON tasks (lambda, key)
    WHERE key IS NOT NULL AND (paced OR key_paced) AND NOT parked
        AND status IN ('new', 'retriable_failure');
-- Debounce: while a debounced task waits for its first enqueue (new, not
-- held, not parked), it is its key's one: a later debounced task of the key
-- collapses into it through the insert's conflict on this index. Once
-- enqueued (or held, parked, cancelled) it leaves the index and the next
-- debounced task of the key starts anew.
CREATE UNIQUE INDEX tasks_debounce ON tasks (lambda, key)
    WHERE debounced AND status = 'new' AND NOT held AND NOT parked;

-- Keys whose places may have freed, for the next poll to unpark as many of
-- the key's oldest parked tasks as there are places. Marks are only ever
-- added (a key may have several), never updated: a landing's mark waits
-- for nobody, and a poll consumes only the marks committed before it reads
-- them.
CREATE TABLE key_landings (
    lambda TEXT NOT NULL,
    key    TEXT NOT NULL
);

CREATE INDEX key_landings_key ON key_landings (lambda, key);

-- A counted task not parked marks its key when it lands (leaves flight) and
-- its lambda has a concurrency per key, or leaves the queue (changes state
-- from anywhere but a running one, to anything but enqueued) and its lambda
-- is fair. A trigger, in the transaction of the change, so that every such
-- change marks it, whichever statement makes it.
CREATE FUNCTION tasks_landed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM lambdas l JOIN lambda_versions v
        ON v.lambda = l.name AND v.version = l.current_version
        WHERE l.name = NEW.lambda AND (
            (v.key_concurrency IS NOT NULL
                AND NEW.status NOT IN ('enqueued', 'claimed', 'processing'))
            OR (v.key_fairness IS NOT NULL
                AND OLD.status NOT IN ('claimed', 'processing')))) THEN
        INSERT INTO key_landings (lambda, key) VALUES (NEW.lambda, NEW.key);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER tasks_landed AFTER UPDATE OF status ON tasks FOR EACH ROW
WHEN (NEW.limited AND NOT NEW.parked
    AND (NEW.status NOT IN ('enqueued', 'claimed', 'processing')
        OR (OLD.status = 'enqueued' AND NEW.status <> 'enqueued')))
EXECUTE FUNCTION tasks_landed();

--------------------------------------------------------------------------
-- Pacing: a lambda's quota and a key's rate.
--------------------------------------------------------------------------

-- The (fractional) Unix millisecond of each quota-limited lambda's next
-- free slot: the poll enqueues its tasks at most at its rate.
CREATE TABLE lambda_pace (
    lambda       TEXT PRIMARY KEY REFERENCES lambdas (name),
    next_slot_at DOUBLE PRECISION NOT NULL
);

-- Each key's next free slot of its lambda's rate per key, locked while a
-- poll gives slots out, so every consumer shares one bucket per key. A row
-- whose slot lies a day (the longest period) in the past says no more than
-- no row, and the pruner deletes it.
CREATE TABLE key_pace (
    lambda       TEXT NOT NULL,
    key          TEXT NOT NULL,
    next_slot_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (lambda, key)
);

CREATE INDEX key_pace_slot ON key_pace (next_slot_at);

--------------------------------------------------------------------------
-- Gates, cron schedules, tokens.
--------------------------------------------------------------------------

-- A lambda's or a collection's gate: paused or dropping its tasks.
CREATE TABLE gates (
    lambda     TEXT NOT NULL REFERENCES lambdas (name),
    -- '' for the whole lambda.
    collection TEXT NOT NULL,
    state      TEXT NOT NULL CHECK (state IN ('open', 'paused', 'dropped')),
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (lambda, collection)
);

-- Periodic schedules; `key` is the key of the tasks each makes.
CREATE TABLE crons (
    id         TEXT PRIMARY KEY,
    lambda     TEXT NOT NULL REFERENCES lambdas (name),
    cron       TEXT NOT NULL,
    timezone   TEXT NOT NULL,
    payload    BYTEA NOT NULL,
    collection TEXT,
    priority   BIGINT,
    catch_up   BOOLEAN NOT NULL,
    next_at    BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    key        TEXT
);

CREATE INDEX crons_next_at ON crons (next_at);

-- API tokens. Only the SHA-256 of a token's secret is kept: the secret is
-- shown once, at creation. `lambdas` is a JSON array of the lambda names an
-- owner or scheduler token is limited to.
CREATE TABLE tokens (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    role       TEXT NOT NULL CHECK (role IN ('admin', 'owner', 'scheduler')),
    lambdas    TEXT NOT NULL,
    hash       TEXT NOT NULL UNIQUE,
    created_at BIGINT NOT NULL,
    revoked_at BIGINT
);

--------------------------------------------------------------------------
-- Operations: duties and history.
--------------------------------------------------------------------------

-- One holder at a time of a duty across the processes sharing the store
-- (the pruner): a lease by name, taken over once `until` has passed.
CREATE TABLE duties (
    name   TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    until  BIGINT NOT NULL
);

-- Task history for the dashboard's charts, kept apart from the tasks
-- (which are pruned): per lambda and minute, the executions that ended and
-- how, and the sampled queue depth. The HSCs add their in-memory counts to
-- it every few seconds.
CREATE TABLE task_minutes (
    lambda    TEXT NOT NULL,
    -- The minute's start, in Unix milliseconds.
    minute    BIGINT NOT NULL,
    succeeded BIGINT NOT NULL DEFAULT 0,
    failed    BIGINT NOT NULL DEFAULT 0,
    -- Of the failed, those whose task then died (out of attempts).
    dead      BIGINT NOT NULL DEFAULT 0,
    -- Tasks due and waiting to start, as sampled once in the minute; NULL
    -- when no sample was taken.
    depth     BIGINT,
    PRIMARY KEY (lambda, minute)
);

-- The overall charts and the history's pruning read by minute.
CREATE INDEX task_minutes_minute ON task_minutes (minute);

-- The schedule-to-start latency of each lambda and minute: a histogram
-- whose bucket b holds the latencies in [2^(b-1), 2^b) ms (bucket 0: under
-- 1 ms), a row per bucket that holds any, so histograms merge by adding.
CREATE TABLE task_latency (
    lambda TEXT NOT NULL,
    minute BIGINT NOT NULL,
    bucket BIGINT NOT NULL,
    n      BIGINT NOT NULL,
    PRIMARY KEY (lambda, minute, bucket)
);

CREATE INDEX task_latency_minute ON task_latency (minute);
