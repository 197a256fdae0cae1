"""Outbound HTTP for Python lambdas: a small blocking client on `wasi:http`.

A lambda that calls HTTP builds against the `http-lambda` world and is
deployed with the destinations it may reach (`--allow-outbound PATTERN`);
anything else is refused before any I/O, and the task's log says what to
add::

    import waft, waft_http

    def notify(task):
        response = waft_http.post("https://hooks.example.com/notify",
                                  json={"id": task.id}, timeout_ms=5000)
        if response.status >= 500:
            return waft.retry(f"answered {response.status}")
        return waft.success(response.text())

Every request carries an `Idempotency-Key` header, the same on every attempt
of a task (its key and the request's rank within the execution), so the
receiving service can tell a repeat; pass `idempotency_key=None` to leave
it out. Redirects are not followed: a 3xx is returned as it is.
"""

import json as _json
from urllib.parse import urlsplit

from componentize_py_types import Err, Ok
from wit_world.imports import outgoing_handler, streams
from wit_world.imports import wasi_http_types as http

import waft

_KEEP = object()
# `blocking_write_and_flush` takes at most this many bytes a call.
_WRITE_CHUNK = 4096
_READ_CHUNK = 65536
_METHODS = {
    "GET": http.Method_Get(),
    "HEAD": http.Method_Head(),
    "POST": http.Method_Post(),
    "PUT": http.Method_Put(),
    "DELETE": http.Method_Delete(),
    "PATCH": http.Method_Patch(),
    "OPTIONS": http.Method_Options(),
}


class HttpError(Exception):
    """A request that got no response. `denied` is true when the host
    refused the destination (retrying will not help: the grant is missing);
    otherwise the failure (a timeout, a refused connection) may pass."""

    def __init__(self, message, denied=False):
        super().__init__(message)
        self.denied = denied


class Response:
    """A whole response: `status`, `headers` (lower-case names) and `body`."""

    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    def text(self):
        return self.body.decode("utf-8", errors="replace")

    def json(self):
        return _json.loads(self.body)


def get(url, **options):
    return request("GET", url, **options)


def post(url, **options):
    return request("POST", url, **options)


def put(url, **options):
    return request("PUT", url, **options)


def delete(url, **options):
    return request("DELETE", url, **options)


def request(method, url, body=b"", json=None, headers=None, timeout_ms=None,
            idempotency_key=_KEEP):
    """Sends one request and reads its whole response; raises `HttpError`
    when there is none."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise HttpError(f"not an http(s) URL: {url!r}")
    fields = [(name.lower(), str(value).encode()) for name, value in (headers or {}).items()]
    if json is not None:
        body = _json.dumps(json).encode()
        fields.append(("content-type", b"application/json"))
    elif isinstance(body, str):
        body = body.encode()
    key = waft._next_idempotency_key() if idempotency_key is _KEEP else idempotency_key
    if key is not None:
        fields.append(("idempotency-key", key.encode()))

    outgoing = http.OutgoingRequest(http.Fields.from_list(fields))
    outgoing.set_method(_METHODS.get(method.upper()) or http.Method_Other(method.upper()))
    outgoing.set_scheme(http.Scheme_Https() if parts.scheme == "https" else http.Scheme_Http())
    outgoing.set_authority(parts.netloc)
    path = parts.path or "/"
    outgoing.set_path_with_query(f"{path}?{parts.query}" if parts.query else path)
    options = None
    if timeout_ms is not None:
        options = http.RequestOptions()
        for set_timeout in (options.set_connect_timeout, options.set_first_byte_timeout,
                            options.set_between_bytes_timeout):
            set_timeout(int(timeout_ms) * 1_000_000)

    outgoing_body = outgoing.body()
    try:
        future = outgoing_handler.handle(outgoing, options)
    except Err as error:
        raise _failure(url, error.value) from None
    try:
        with outgoing_body.write() as stream:
            for start in range(0, len(body), _WRITE_CHUNK):
                stream.blocking_write_and_flush(body[start:start + _WRITE_CHUNK])
        http.OutgoingBody.finish(outgoing_body, None)
    except Err:
        pass  # the request failed; its response says why
    with future:
        with future.subscribe() as ready:
            ready.block()
        answer = future.get()
    if isinstance(answer, Ok) and isinstance(answer.value, Ok):
        return _read(answer.value.value)
    if isinstance(answer, Ok) and isinstance(answer.value, Err):
        raise _failure(url, answer.value.value)
    raise HttpError(f"{url}: the host gave no response")


def _read(response):
    with response:
        status = response.status()
        headers = {}
        with response.headers() as fields:
            for name, value in fields.entries():
                text = value.decode("latin-1")
                headers[name] = f"{headers[name]}, {text}" if name in headers else text
        incoming = response.consume()
        chunks = []
        try:
            with incoming.stream() as stream:
                while True:
                    try:
                        chunks.append(stream.blocking_read(_READ_CHUNK))
                    except Err as error:
                        if isinstance(error.value, streams.StreamError_Closed):
                            break
                        failed = error.value.value
                        code = http.http_error_code(failed)
                        raise HttpError(f"reading the response failed: {code or failed.to_debug_string()}") from None
        finally:
            http.IncomingBody.finish(incoming)
    return Response(status, headers, b"".join(chunks))


def _failure(url, code):
    if isinstance(code, http.ErrorCode_HttpRequestDenied):
        return HttpError(f"{url} was refused: see the task's log", denied=True)
    return HttpError(f"{url}: {type(code).__name__.removeprefix('ErrorCode_')}")
