"""Write Waft lambdas in Python.

A lambda is a function from a `Task` to an outcome (`success`, `retry`,
`fatal`); `handler` turns it into the component's export::

    import waft

    def greet(task):
        name = task.json().get("name", "world")
        waft.info(f"greeting {name}")
        return waft.success({"greeting": f"Hello, {name}!"})

    Handler = waft.handler(greet)

Build it with componentize-py against Waft's WIT (see the README):

    componentize-py -d wit -w waft:lambda/lambda@0.1.0 componentize app \\
        -p path/to/lambda -p sdk/python -o lambda.wasm

An exception the function does not catch is a retriable failure carrying
its message, as `?` is in Rust; use `fatal` for a failure no retry mends.
"""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import host, types


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
        host.heartbeat(progress)
    except Err as lost:
        raise LeaseLost(lost.value.reason) from None


def log(level, message, **fields):
    """Appends a record to the task's log."""
    host.log(level, str(message), [(k, str(v)) for k, v in fields.items()])


def debug(message, **fields):
    log(host.Level.DEBUG, message, **fields)


def info(message, **fields):
    log(host.Level.INFO, message, **fields)


def warn(message, **fields):
    log(host.Level.WARN, message, **fields)


def error(message, **fields):
    log(host.Level.ERROR, message, **fields)


def handler(function):
    """The component's `handler` export, running `function` on each task."""

    class Handler(exports.Handler):
        def handle(self, task):
            try:
                outcome = function(Task(task))
            except LeaseLost as lost:
                return retry(f"lease lost: {lost}")
            except Exception as failure:  # noqa: BLE001 - a task's failure, reported
                return retry(f"{type(failure).__name__}: {failure}")
            return success() if outcome is None else outcome

    return Handler
