"""Write Waft lambdas in Python.

A lambda is a function from a `Task` to an outcome (`success`, `retry`,
`fatal`); `handler` turns it into the component's export::

    import waft

    def greet(task):
        name = task.json().get("name", "world")
        waft.info(f"greeting {name}")
        return waft.success({"greeting": f"Hello, {name}!"})

    Handler = waft.handler(greet)

Build it with componentize-py against Waft's WIT (see docs/lambdas.md):

    componentize-py -d wit -w lambda componentize app \\
        -p path/to/lambda -p sdk/python -o lambda.wasm

(`lambda` is the world of the `waft:lambda` version in `wit/lambda.wit`.)
A lambda that calls HTTP builds against its `http-lambda` world instead
and uses `waft_http`; it must be deployed with `--allow-outbound`.

An exception the function does not catch is a retriable failure carrying
its message, as `?` is in Rust; use `fatal` for a failure no retry mends.
"""

import json
import time

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import children, heartbeat as _heartbeat, log as _log, signals as _signals, store

try:
    from wit_world.imports import types
except ImportError:  # the http-lambda world, where wasi:http has a `types` too
    from wit_world.imports import waft_lambda_types as types


class Task:
    """The task being run: its identity, attempt and payload."""

    def __init__(self, raw):
        self.id = raw.id
        self.lambda_name = raw.lambda_
        self.collection = raw.collection
        self.priority = raw.priority
        self.attempt = raw.attempt
        self.scheduled_at_ms = raw.scheduled_at
        self.payload = raw.payload

    def text(self):
        """The payload as UTF-8 text."""
        return self.payload.decode("utf-8")

    def json(self):
        """The payload parsed as JSON (an empty payload is `{}`)."""
        return json.loads(self.payload) if self.payload else {}

    def idempotency_key(self):
        """A key naming this task's work, the same on every attempt."""
        return f"waft-{self.id}"


def _bytes(output):
    if output is None or isinstance(output, bytes):
        return output
    if isinstance(output, str):
        return output.encode("utf-8")
    return json.dumps(output).encode("utf-8")


def success(output=None):
    """Done; `output` is bytes, text, or anything JSON can encode."""
    return types.Outcome_Success(_bytes(output))


def retry(message, after_ms=None):
    """Not done; try again (after `after_ms` milliseconds, if given)."""
    return types.Outcome_Retriable(types.RetriableFailure(str(message), after_ms))


def fatal(message):
    """Not done and never will be: no retry."""
    return types.Outcome_Fatal(str(message))


class LeaseLost(Exception):
    """The execution lost its lease: stop, with no further side effect."""


def heartbeat(progress=None):
    """Says the execution is alive, optionally how far it got."""
    try:
        _heartbeat.beat(progress)
    except Err as lost:
        raise LeaseLost(lost.value.reason) from None


def log(level, message, **fields):
    """Appends a record to the task's log."""
    _log.log(level, str(message), [(k, str(v)) for k, v in fields.items()])


def debug(message, **fields):
    log(_log.Level.DEBUG, message, **fields)


def info(message, **fields):
    log(_log.Level.INFO, message, **fields)


def warn(message, **fields):
    log(_log.Level.WARN, message, **fields)


def error(message, **fields):
    log(_log.Level.ERROR, message, **fields)


def config(key, default=None):
    """The lambda's variable or secret `key`, or `default` if it has none."""
    try:
        value = store.get(key)
    except Err:
        return default
    return default if value is None else value


class ScheduleError(Exception):
    """A child task was not scheduled; `retriable` says whether to retry."""

    def __init__(self, message, retriable):
        super().__init__(message)
        self.retriable = retriable


def schedule(lambda_name, payload=b"", collection=None, priority=None, key=None):
    """Schedules a child task of `lambda_name`; returns its id. `key` is the
    child's key within its lambda (a customer, an account), which its limits
    per key count by."""
    child = children.ChildTask(lambda_name, _bytes(payload) or b"", collection, priority, None)
    try:
        if key is None:
            return children.schedule(child)
        return children.schedule_keyed(child, key)
    except Err as error:
        rejection = error.value
        if isinstance(rejection, children.ScheduleError_LeaseLost):
            raise LeaseLost(rejection.value.reason) from None
        retriable = isinstance(rejection, children.ScheduleError_Unavailable)
        raise ScheduleError(str(rejection.value), retriable) from None


class ChildEnd:
    """How a child ended, as `wait_all` returns it: `id`; `status`, one of
    "success", "fatal_failure", "dead", "dropped", "cancelled"; `output`
    (bytes, or None) and `error` (str, or None)."""

    def __init__(self, end):
        self.id = end.id
        self.status = end.status.name.lower()
        self.output = end.output
        self.error = end.error

    @property
    def succeeded(self):
        return self.status == "success"

    def json(self):
        """The child's output, decoded from JSON."""
        return json.loads(self.output or b"null")

    def __repr__(self):
        return f"ChildEnd({self.id!r}, {self.status!r})"


def wait_all(ids):
    """Waits until every task of `ids` — children this task scheduled — has
    ended; returns each one's `ChildEnd`, in the order of `ids` (a fan-in).
    A wait that does not end within the executor's `suspend_after` suspends
    the task as `sleep` does, until the last child ends; what it returned
    is journaled (docs/durable.md, "Fan-in")."""
    return [ChildEnd(end) for end in children.wait_all(list(ids))]


_execution = {"key": None, "requests": 0}


def sleep(seconds):
    """Waits `seconds`, durably: a wait past the executor's `suspend_after`
    (1 s by default) suspends the task — its instance dropped, its slot
    freed — until the time has come, and the next execution replays the
    journal up to here (docs/durable.md, "Durable sleep"). `time.sleep` behaves the
    same way; this says so where it is called."""
    time.sleep(seconds)


def wait_signal(name, timeout_seconds):
    """Waits for the signal `name` sent to this task (`waft task signal`),
    at most `timeout_seconds`; returns its payload (bytes), or None when the
    time passed first. A signal sent before the wait is kept and taken here,
    one a wait, in the order they came. A long wait suspends the task as
    `sleep` does; what it returned is journaled (docs/durable.md, "Signals")."""
    return _signals.wait(name, max(0, int(timeout_seconds * 1000)))


def _next_idempotency_key():
    """The `Idempotency-Key` of the execution's next request: the task's key
    and the request's rank, the same on every attempt."""
    rank = _execution["requests"]
    _execution["requests"] = rank + 1
    return f"{_execution['key']}-{rank}"


def handler(function):
    """The component's `handler` export, running `function` on each task."""

    class Handler(exports.Handler):
        def handle(self, task):
            task = Task(task)
            _execution["key"] = task.idempotency_key()
            _execution["requests"] = 0
            try:
                outcome = function(task)
            except LeaseLost as lost:
                return retry(f"lease lost: {lost}")
            except Exception as failure:  # noqa: BLE001 - a task's failure, reported
                return retry(f"{type(failure).__name__}: {failure}")
            return success() if outcome is None else outcome

    return Handler
